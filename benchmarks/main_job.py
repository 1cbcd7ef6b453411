"""How long the README's main job takes and what its two models reach, as a newcomer
runs it: `python -m workflows.imdb_sentiment run` in a fresh clone of HEAD, with a new
work folder and store (the archive extracted and prepared, GloVe read, both models
trained, scored on the 25,000 test reviews, tried and compared), alone on the machine.

    python benchmarks/main_job.py --imdb-path ../shared/data/aclImdb_v1.tar.gz [--keep DIR]

Writes `benchmarks/results/main_job.json`: the wall time, and each run's test accuracy
beside the book figures the issue set (bag of bigrams 0.901, GloVe BiLSTM 0.891).
`--keep DIR` runs it in DIR and leaves the clone there, with its store
(`DIR/clone/mlflow/mlflow.db`, which `ui_screenshots.py --store` photographs).
"""

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "main_job.json"
TARGETS = {"bow": 0.901, "bilstm_glove": 0.891}


def timed_main_job(archive, scratch):
    """(seconds, {model: test accuracy}, commit) of the main job in a clone of HEAD."""
    import os

    clone = scratch / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "NLPKIT_WORK_DIR": str(scratch / "work")}
    env.pop("MLFLOW_TRACKING_URI", None)  # the clone's own store
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "workflows.imdb_sentiment", "run", "--imdb-path",
                    str(archive)], cwd=clone, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    found = subprocess.run(
        [sys.executable, "-c", "import mlflow; from workflows.core import store; "
         "e = store.use_experiment('imdb_sentiment'); "
         "[print(r.data.params['model'], r.data.metrics['test_accuracy']) for r in "
         "mlflow.search_runs([e.experiment_id], output_format='list')]"],
        cwd=clone, env=env, capture_output=True, text=True, check=True).stdout
    accuracies = {model: float(value) for model, value in
                  (line.split() for line in found.splitlines() if line.strip())}
    return seconds, accuracies, commit


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/main_job.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--imdb-path", required=True, help="aclImdb_v1.tar.gz")
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument("--keep", metavar="DIR", help="an empty folder to run in and keep")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        scratch = Path(args.keep) if args.keep else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="main-job-")))
        seconds, accuracies, commit = timed_main_job(Path(args.imdb_path).resolve(), scratch)
    write_results({"command": "python -m workflows.imdb_sentiment run", "commit": commit,
                   "machine": machine(), "wall_minutes": round(seconds / 60, 2),
                   "test_accuracy": accuracies, "targets": TARGETS,
                   "met": {model: accuracies.get(model, 0) >= target
                           for model, target in TARGETS.items()}}, args.output)


if __name__ == "__main__":
    main()
