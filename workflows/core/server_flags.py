"""The flags of the kit's servers (a logged model, the MLflow UI) and the argparse types
of their ranges: each a one-line usage error when out of range."""

import argparse
import os

from workflows.core.scoring_app import ServingLimits


def add_server_flags(parser, port):
    """`--host`, `--port` and `--workers`, each with its range."""
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to bind (default: loopback; 0.0.0.0 exposes it)")
    parser.add_argument("--port", type=whole_number(1, 65535), default=port,
                        help=f"TCP port, 1-65535 (default {port})")
    most = 4 * (os.cpu_count() or 1)
    parser.add_argument("--workers", type=whole_number(1, most), default=1,
                        help=f"server worker processes, 1-{most} (default 1)")


def add_model_server_flags(parser):
    """The server flags, and the limits of what a request may hold."""
    add_server_flags(parser, port=5001)
    default = ServingLimits()
    parser.add_argument("--max-request-mb", type=bounded_number(0.001, 1024),
                        default=default.max_request_mb,
                        help="largest request body in MiB, 0.001-1024; a larger one is "
                             f"refused with a 413, never kept in memory (default "
                             f"{default.max_request_mb:g})")
    parser.add_argument("--max-inputs", type=whole_number(1, 10_000_000),
                        default=default.max_inputs,
                        help="most texts (rows) a request, 1-10,000,000; more is refused "
                             f"with a 413 before the model runs (default {default.max_inputs:,})")
    parser.add_argument("--max-concurrent", type=whole_number(1, 100_000),
                        default=default.concurrent,
                        help="most connections each worker takes at once, 1-100,000; the "
                             f"next get a 503 (default {default.concurrent})")
    parser.add_argument("--export", metavar="NAME", help="answer through the run's export "
                        "NAME (onnx, onnx-int8, saved_model, litert...: what its export step "
                        "logged) instead of Keras; same requests and answers")


def serving_limits(args):
    """The `ServingLimits` that a command's flags set."""
    return ServingLimits(args.max_request_mb, args.max_inputs, args.max_concurrent)


def bounded_number(low, high):
    """An argparse type: a finite number from `low` to `high`, else a one-line usage
    error."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:  # NaN fails both
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}, got {text}")
        return value
    return parse


def whole_number(low, high):
    """An argparse type: an int from `low` to `high`, else a one-line usage error."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value
    return parse
