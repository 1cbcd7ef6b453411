"""Load test of the served IMDB model: N concurrent HTTP requests on loopback.

Serves a logged model (`--model-uri`, default: the latest `imdb_sentiment` run) with
`python -m workflows.serve_model` on 127.0.0.1, warms it up, then sends `--requests`
POSTs of `--reviews-per-request` real test reviews from `--concurrency` threads.
Reports throughput, latency percentiles and the error count (must be 0). Then a burst:
`--burst` parallel malformed bodies of `--burst-mb` MiB each (under the server's
`--max-request-mb`, so each is read and parsed), with the answers' largest size and the
server's resident memory idle, right after, and `--settle-seconds` later. Bounded:
loopback only, a fixed number of requests, a timeout per request.

    python benchmarks/serving_load.py --imdb-path ../shared/data/aclImdb_v1.tar.gz

Writes `benchmarks/results/serving_load.json`.
"""

import argparse
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from reporting import machine, write_results  # noqa: E402  (benchmarks/, beside this file)

RESULTS = Path(__file__).with_name("results") / "serving_load.json"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model_uri, port, workers, max_request_mb, log):
    """The launcher of `python -m workflows.serve_model`, once the server answers."""
    process = subprocess.Popen(
        [sys.executable, "-m", "workflows.serve_model", model_uri, "--port", str(port),
         "--workers", str(workers), "--max-request-mb", str(max_request_mb)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5)
            return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.send_signal(signal.SIGINT)
                raise SystemExit(f"The server did not start; see {log.name}") from None
            time.sleep(1)


def server_rss_mb(launcher):
    """Resident memory, MiB, of the server's processes (the launcher's child group)."""
    rows = [line.split() for line in subprocess.run(
        ["ps", "-eo", "pid,ppid,pgid,rss"], capture_output=True, text=True).stdout.splitlines()[1:]]
    groups = {int(pgid) for pid, ppid, pgid, _ in rows if int(ppid) == launcher.pid}
    return round(sum(int(rss) for _, _, pgid, rss in rows if int(pgid) in groups) / 1024, 1)


def burst(url, launcher, count, megabytes, settle_seconds):
    """`count` parallel malformed bodies of `megabytes` MiB: their statuses, the largest
    answer, and the server's memory idle, after them and `settle_seconds` later."""
    body = b"{" + b"x" * int(megabytes * (1 << 20))

    def send(_):
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, len(response.read())
        except urllib.error.HTTPError as error:
            return error.code, len(error.read())

    idle = server_rss_mb(launcher)
    with ThreadPoolExecutor(count) as pool:
        answers = list(pool.map(send, range(count)))
    after = server_rss_mb(launcher)
    time.sleep(settle_seconds)
    return {"requests": count, "megabytes_each": megabytes,
            "statuses": sorted({status for status, _ in answers}),
            "largest_answer_bytes": max(size for _, size in answers),
            "rss_mb": {"idle": idle, "after_burst": after,
                       f"after_{settle_seconds}_s": server_rss_mb(launcher)},
            "settled_over_idle": round(server_rss_mb(launcher) / idle, 3)}


def post(url, reviews):
    """(seconds, HTTP status) of one request."""
    body = json.dumps({"inputs": reviews}).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            predictions = json.loads(response.read())["predictions"]
            status = response.status if len(predictions) == len(reviews) else 599
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError:
        status = 0  # connection error or timeout
    return time.perf_counter() - started, status


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main(argv=None):
    from data_prep import cache, imdb
    from workflows import imdb_sentiment as workflow
    from workflows.core import models, runs
    from workflows.sentiment.sources import source_of_run

    parser = argparse.ArgumentParser(prog="python benchmarks/serving_load.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument(imdb.ACL_IMDB.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--model-uri", help="default: the latest imdb_sentiment run's model")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--reviews-per-request", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--burst", type=int, default=20, help="parallel malformed bodies")
    parser.add_argument("--burst-mb", type=float, default=5.0)
    parser.add_argument("--max-request-mb", type=float, default=8.0,
                        help="the server's limit (above --burst-mb: the bodies are read)")
    parser.add_argument("--settle-seconds", type=int, default=60)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    run = runs.find_run(workflow.EXPERIMENT, runs.source_run_id(args.model_uri)
                            if args.model_uri else None)
    model_uri = args.model_uri or models.model_uri(run.info.run_id)
    config = runs.config_of(workflow.LESSON, run)
    source = source_of_run(run, args.imdb_path)  # a run of a user's texts: theirs
    texts = workflow.load_data(config, source, args.work_dir).prepared.texts("test")
    size = args.reviews_per_request
    payloads = [[texts[(i * size + k) % len(texts)] for k in range(size)]
                for i in range(args.requests)]
    port = free_port()
    url = f"http://127.0.0.1:{port}/invocations"
    log_path = cache.work_dir(args.work_dir) / "logs" / "serving_load.server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        print(f"Serving {model_uri} ({config.model}) on 127.0.0.1:{port}")
        process = start_server(model_uri, port, args.workers, args.max_request_mb, log)
        try:
            for payload in payloads[:10]:  # warm-up
                post(url, payload)
            started = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                outcomes = list(pool.map(lambda payload: post(url, payload), payloads))
            seconds = time.perf_counter() - started
            bursting = burst(url, process, args.burst, args.burst_mb, args.settle_seconds)
        finally:
            process.send_signal(signal.SIGINT)  # the launcher stops its server group
            process.wait(timeout=60)
    latencies = [1000 * latency for latency, _ in outcomes]
    errors = sum(status != 200 for _, status in outcomes)
    results = {
        "model_uri": model_uri, "model": config.model, "requests": args.requests,
        "concurrency": args.concurrency, "reviews_per_request": size,
        "server_workers": args.workers, "seconds": round(seconds, 2),
        "requests_per_second": round(args.requests / seconds, 1),
        "reviews_per_second": round(args.requests * size / seconds, 1),
        "latency_ms": {"p50": round(percentile(latencies, 50), 1),
                       "p95": round(percentile(latencies, 95), 1),
                       "p99": round(percentile(latencies, 99), 1),
                       "max": round(max(latencies), 1)},
        "errors": errors, "burst": bursting,
        "machine": machine(),
    }
    write_results(results, args.output)
    if errors:
        raise SystemExit(f"{errors} request(s) failed; see {log_path}")


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
