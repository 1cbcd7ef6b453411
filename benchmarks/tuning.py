"""A real hyperparameter tuning on IMDB, with 1 and with 2 workers, through the CLI.

Runs the IMDB lesson's `tune` step twice with the same space and trial budget, one
study per worker count (their samplers differ, so they try different configs and no
trial reuses another study's run). Records each search's wall time, how many trials
finished and were pruned, the best validation accuracy and, after `evaluate`, the
best trial's accuracy on the 25,000 test reviews.

    NLPKIT_WORK_DIR=work MLFLOW_TRACKING_URI=sqlite:///work/mlflow.db \
        python benchmarks/tuning.py --imdb-path ../shared/data/aclImdb_v1.tar.gz

Writes `benchmarks/results/tuning.json`; the worker logs are under `$NLPKIT_WORK_DIR/tuning/`.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))
from workflows.core.metric_groups import ungrouped  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "tuning.json"
ROOT = Path(__file__).resolve().parents[1]
SPACE = ["learning_rate=loguniform:1e-4:3e-3", "hidden_units=choice:8,16,32,64",
         "dropout=uniform:0.2:0.7", "output_mode=choice:tf_idf,multi_hot",
         "max_tokens=choice:20000,50000,100000"]


def search_command(args, workers):
    command = [sys.executable, "-m", "workflows.imdb_sentiment", "tune", "--model", "bow",
               "--epochs", str(args.epochs), "--trials", str(args.trials), "--metric",
               "val_accuracy", "--workers", str(workers), "--study",
               f"{args.study_prefix}-{workers}-workers"]
    if args.imdb_path:
        command += ["--imdb-path", args.imdb_path]
    for dimension in SPACE:
        command += ["--space", dimension]
    return command


def run_search(args, workers):
    import mlflow

    from workflows import imdb_sentiment as workflow
    from workflows.core import store

    started = time.monotonic()
    subprocess.run(search_command(args, workers), cwd=ROOT, check=True)
    wall = time.monotonic() - started
    store.use_experiment(workflow.EXPERIMENT)
    (parent,) = mlflow.search_runs(
        experiment_names=[workflow.EXPERIMENT], output_format="list",
        filter_string=f"tags.optuna_study = '{args.study_prefix}-{workers}-workers' "
                      "and tags.tune = 'true'")
    best = parent.data.tags["best_child_run_id"]
    evaluate = [sys.executable, "-m", "workflows.imdb_sentiment", "evaluate", "--run-id", best]
    if args.imdb_path:
        evaluate += ["--imdb-path", args.imdb_path]
    subprocess.run(evaluate, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    best_run = mlflow.MlflowClient().get_run(best)
    metrics = ungrouped(parent.data.metrics)
    return {"workers": workers, "wall_minutes": round(wall / 60, 2),
            "trials_complete": int(metrics["trials_complete"]),
            "trials_pruned": int(metrics["trials_pruned"]),
            "trials_failed": int(metrics["trials_fail"]),
            "best_val_accuracy": round(metrics["best_val_accuracy"], 4),
            "best_test_accuracy": round(best_run.data.metrics["test_accuracy"], 4),
            "best_params": {key: best_run.data.params[key]
                            for key in (dimension.split("=")[0] for dimension in SPACE)},
            "parent_run_id": parent.info.run_id, "best_run_id": best}


def main():
    from reporting import machine, write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--imdb-path", help="aclImdb_v1.tar.gz or its extracted folder")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--study-prefix", default="benchmark-bow")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "workflows.imdb_sentiment", "prepare",
                    "--skip-word2vec", *(["--imdb-path", args.imdb_path] if args.imdb_path
                                         else [])], cwd=ROOT, check=True)
    searches = [run_search(args, workers) for workers in (1, 2)]
    write_results({"machine": machine(), "model": "bow", "space": SPACE, "epochs": args.epochs,
                   "trials": args.trials, "metric": "val_accuracy", "pruner": "median",
                   "searches": searches,
                   "speedup_2_workers": round(searches[0]["wall_minutes"]
                                              / searches[1]["wall_minutes"], 2)}, RESULTS)


if __name__ == "__main__":
    main()
