"""The `label` step's flags, checked before anything loads: `-k`, `--workers`, the Beam
runner, the Dask scheduler's address, and an `--output` that is this labelling's own."""

import json
import os
import re
from pathlib import Path

from workflows.core.config import ConfigError

DASK_ADDRESS_ENV = "NLPKIT_DASK_ADDRESS"  # `label --runner dask`'s scheduler by default
# `label --runner`: Beam's local runner, Dask, and the portable runners (their options
# from Beam's own environment)
RUNNERS = ("DirectRunner", "dask", "FlinkRunner", "SparkRunner", "PortableRunner")
DASK_ADDRESS = re.compile(r"(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9a-fA-F:]+\]|[\w.-]+):\d{1,5}")


def check_k(k):
    if not 1 <= k <= 1000:
        raise ConfigError(f"-k must be between 1 and 1000, got {k}.")


def check_workers(workers):
    if not 1 <= workers <= 256:
        raise ConfigError(f"--workers must be between 1 and 256, got {workers}.")


def check_label(args):
    """`label`'s flags, before anything loads: `-k`, `--workers`, and an `--output` that
    is neither the queries file nor another file than this labelling's own output."""
    check_k(args.k)
    check_workers(args.workers)
    if args.dask_address and args.runner != "dask":
        raise ConfigError("--dask-address goes with --runner dask.")
    if args.runner not in RUNNERS:
        raise ConfigError(f"--runner {args.runner!r} is not a runner this labelling knows: "
                          f"give one of {', '.join(RUNNERS)}.")
    address = dask_address(args)
    if address and not DASK_ADDRESS.fullmatch(address):
        raise ConfigError(f"Dask scheduler address {address!r} is not one: give "
                          "tcp://HOST:PORT (as `dask scheduler` prints it).")
    queries, output = Path(args.file), Path(args.output)
    if not output.exists():
        return
    if output.is_dir():
        raise ConfigError(f"--output {output} is a folder; give a file path.")
    if queries.exists() and output.samefile(queries):
        raise ConfigError(f"--output {output} is the --file of queries: give another path "
                          "(the queries would be overwritten).")
    try:
        with open(output, encoding="utf-8") as file:
            first = json.loads(file.readline())
        with open(queries, encoding="utf-8") as file:
            query = file.readline().rstrip("\n")
        ours = first.get("line") == 1 and first.get("query") == query and "results" in first
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise ConfigError(f"--output {output} exists and is not an earlier output of this "
                          "labelling: give a new path, or remove that file first.")


def dask_address(args):
    """`label --runner dask`'s scheduler: `--dask-address`, else $NLPKIT_DASK_ADDRESS,
    else None (a cluster on this machine)."""
    if args.runner != "dask":
        return None
    return args.dask_address or os.environ.get(DASK_ADDRESS_ENV) or None
