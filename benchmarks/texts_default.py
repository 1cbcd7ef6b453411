"""Does `run --texts` with its defaults pick a model as good as a family chosen by hand?

A small user's file, as one arrives: a seeded sample of IMDB train reviews (raw, with
their `<br />` tags and any character the archive holds; half positive) written as a
CSV of `text,label`, and a sample of the official test reviews as the test file. In a
work folder and store of its own each time, this runs

    python -m workflows.imdb_sentiment run --texts train.csv --test-texts test.csv \
        --max-train-minutes M

with the defaults, then `run --model F` with the same files and budget for every
family the default may train (each alone, so each has the whole budget), and records
the test macro-F1 and accuracy of the run the default said to use beside each.

    python benchmarks/texts_default.py --imdb-path ../shared/data/aclImdb_v1.tar.gz

Writes `benchmarks/results/texts_default.json`.
"""

import argparse
import csv
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.reporting import machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "texts_default.json"
FAMILIES = ("bow", "nbsvm", "bilstm", "encoder")


def sample_files(archive, folder, train_size, test_size, seed=0):
    """`(train.csv, test.csv)`: `train_size` train and `test_size` test reviews, raw."""
    reviews = {"train": [], "test": []}
    with tarfile.open(archive) as tar:
        for member in tar:
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 4 and parts[1] in reviews \
                    and parts[2] in ("pos", "neg"):
                text = tar.extractfile(member).read().decode("utf-8")
                reviews[parts[1]].append((member.name, text, parts[2]))
    paths = {}
    for split, size in (("train", train_size), ("test", test_size)):
        rows = sorted(reviews[split])
        random.Random(seed).shuffle(rows)
        paths[split] = folder / f"{split}.csv"
        with paths[split].open("w", encoding="utf-8", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["text", "label"])
            writer.writerows((text, label) for _, text, label in rows[:size])
    return paths["train"], paths["test"]


def run_step(argv, folder):
    """Runs a lesson command in a new work folder and store under `folder`; returns its
    output and minutes."""
    environment = {**os.environ, "NLPKIT_WORK_DIR": str(folder / "work"),
                   "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workflows.imdb_sentiment", *argv],
                          cwd=ROOT, env=environment, capture_output=True, text=True,
                          check=False)
    minutes = (time.perf_counter() - started) / 60
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout, round(minutes, 2), environment["MLFLOW_TRACKING_URI"]


def test_scores(uri):
    """`{run id: (model, test macro-F1, test accuracy, validation macro-F1)}` of a store."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("imdb_sentiment")
    found = mlflow.search_runs([experiment.experiment_id], output_format="list")
    return {run.info.run_id: {
        "model": run.data.params.get("model"),
        "test_macro_f1": round(run.data.metrics.get("test_macro_f1", float("nan")), 4),
        "test_accuracy": round(run.data.metrics.get("test_accuracy", float("nan")), 4),
        "val_macro_f1": round(run.data.metrics.get(
            "crossval_val_macro_f1", run.data.metrics.get("best_val_macro_f1", float("nan"))),
            4)} for run in found}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--imdb-path", required=True, help="aclImdb_v1.tar.gz")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=2000)
    parser.add_argument("--minutes", type=float, default=10, help="--max-train-minutes")
    parser.add_argument("--family", action="append", choices=FAMILIES,
                        help="the families run alone (default: all four)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="texts-default-") as scratch:
        scratch = Path(scratch)
        train, test = sample_files(args.imdb_path, scratch, args.train_size, args.test_size)
        files = ["--texts", str(train), "--test-texts", str(test),
                 "--max-train-minutes", f"{args.minutes:g}"]
        printed, minutes, uri = run_step(["run", *files], scratch / "default")
        chosen = re.search(r"^Use run (\w+) \((\w+)\)", printed, re.MULTILINE)
        scores = test_scores(uri)
        default = {"command": "run --texts train.csv --test-texts test.csv "
                              f"--max-train-minutes {args.minutes:g}",
                   "minutes": minutes, "runs": list(scores.values()),
                   "left_out": re.findall(r"^Leaving out .*$", printed, re.MULTILINE),
                   "chosen": scores[chosen.group(1)] if chosen else None}
        alone = []
        for family in args.family or FAMILIES:
            _, minutes, uri = run_step(["run", "--model", family, *files], scratch / family)
            (score,) = test_scores(uri).values()
            alone.append({**score, "minutes": minutes})
    best = max(alone, key=lambda row: row["test_macro_f1"])
    write_results({**machine(), "train_reviews": args.train_size,
                   "test_reviews": args.test_size, "max_train_minutes": args.minutes,
                   "default": default, "alone": alone,
                   "best_by_hand": best,
                   "default_at_least_as_good": bool(default["chosen"]) and
                   default["chosen"]["test_macro_f1"] >= best["test_macro_f1"]}, RESULTS)


if __name__ == "__main__":
    main()
