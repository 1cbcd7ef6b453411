"""How much of an epoch's wall time the `gpu` translator spends outside its training
batches: validation, the per-epoch BLEU, checkpoints, logging.

Runs the lesson's own `train --preset gpu` on the real pairs, on JAX as on a GPU machine,
with the model shrunk so that a CPU trains a few epochs (`--set` flags below), once per
checkout given (this one, and e.g. a worktree of an older commit, to compare in one run),
each in its own work folder and store; then reads each run's per-epoch metrics and
reports the epochs after the first (which compiles): training seconds, wall seconds, the
training share and the end work per training second. It also times one checkpoint of the
full-size `gpu` translator, the cost that dominates on a GPU.

    python benchmarks/epoch_end.py --spa-eng-path ../shared/data/spa-eng.zip \
        --checkout now=. --checkout before=/tmp/kit-before
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import machine, write_results  # noqa: E402

SHRUNK = ["--set", "embed_dim=64", "--set", "dense_dim=128", "--set", "num_heads=2",
          "--set", "encoder_layers=2", "--set", "decoder_layers=2", "--set", "patience=20"]


def train(checkout, work, store, spa_eng, epochs):
    env = {**os.environ, "KERAS_BACKEND": "jax", "NLPKIT_WORK_DIR": str(work),
           "MLFLOW_TRACKING_URI": f"sqlite:///{store}", "NLPKIT_SPA_ENG_PATH": str(spa_eng),
           "PYTHONPATH": str(checkout)}
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "workflows.translation", "train", "--preset", "gpu",
                    "--epochs", str(epochs), *SHRUNK], cwd=checkout, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def epoch_table(store):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{store}")
    (run,) = mlflow.search_runs(experiment_names=["translation"], output_format="list")
    client = mlflow.MlflowClient()
    names = ("epoch_seconds", "epoch_wall_seconds", "validation_seconds", "checkpoint_seconds",
             "val_decode_seconds")
    history = {name: {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}
               for name in names}
    # wall time between two epochs' logged losses: what both versions log alike (the
    # older code's `epoch_wall_seconds` left out its end-of-epoch checkpoints)
    logged = {m.step: m.timestamp / 1000 for m in client.get_metric_history(run.info.run_id,
                                                                             "loss")}
    return [{name: history[name].get(step) for name in names} | {
        "epoch": step, "logged_interval_seconds": logged[step] - logged[step - 1]
        if step - 1 in logged else None} for step in sorted(history["epoch_seconds"])]


def summary(epochs):
    steady = [e for e in epochs if e["epoch"] > 1 and e["logged_interval_seconds"]]
    training = sum(e["epoch_seconds"] for e in steady)
    wall = sum(e["logged_interval_seconds"] for e in steady)
    return {"steady_epochs": len(steady), "training_seconds": round(training, 2),
            "wall_seconds": round(wall, 2), "training_share": round(training / wall, 4),
            "end_work_per_training_second": round((wall - training) / training, 4)}


def full_size_checkpoint_seconds():
    """Seconds to write one checkpoint (weights and Adam's state) of the full `gpu`
    translator, and its size."""
    import keras

    from workflows.core.training import TrainingFolder, TrainingState
    from workflows.seq2seq.presets import make_config
    from workflows.translation import build_model

    config = make_config("transformer", "gpu")
    model = build_model(config, 8000, 8000)
    model.optimizer.build(model.trainable_variables)
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        TrainingFolder(folder).checkpoint(model, TrainingState())
        seconds = time.perf_counter() - started
        size = sum(p.stat().st_size for p in Path(folder).glob("checkpoint-*"))
    return {"parameters": model.count_params(), "seconds": round(seconds, 2),
            "megabytes": round(size / 2**20), "backend": keras.backend.backend()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/epoch_end.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--spa-eng-path", required=True)
    parser.add_argument("--checkout", action="append", default=[],
                        help="NAME=PATH of a checkout of the kit (default: now=.)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--work-dir", default="work",
                        help="its prepared pairs are shared, read-only")
    parser.add_argument("--output", default="benchmarks/results/epoch_end.json")
    args = parser.parse_args(argv)
    results = {"machine": machine(), "config": "gpu preset with " + " ".join(SHRUNK[1::2]),
               "runs": {}}
    with tempfile.TemporaryDirectory(prefix="epoch-end-") as scratch:
        for name, checkout in (item.split("=", 1) for item in args.checkout or ["now=."]):
            work = Path(scratch) / name / "work"
            work.mkdir(parents=True)
            for entry in Path(args.work_dir).resolve().iterdir():  # prepared data, shared
                if entry.name != "runs":
                    (work / entry.name).symlink_to(entry)
            store = Path(scratch) / name / "mlflow.db"
            seconds = train(Path(checkout).resolve(), work, store, args.spa_eng_path,
                            args.epochs)
            epochs = epoch_table(store)
            results["runs"][name] = {"checkout": checkout, "train_command_seconds":
                                     round(seconds, 1), **summary(epochs), "epochs": epochs}
    results["full_size_gpu_checkpoint"] = full_size_checkpoint_seconds()
    write_results(results, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
