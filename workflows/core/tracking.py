"""What a run records in the MLflow store: where and how it was made (commit, command,
backend, device), its config as params, its setup, each epoch, what was compiled, and
its summary, curves and schedule."""

import dataclasses
import importlib
import os
import shlex
import subprocess
import sys
import warnings

from process.commands import cpu_model
from workflows.core.metric_groups import grouped, ungrouped
from workflows.core.store import PROJECT_ROOT


def git_commit():
    """The current commit (with `-dirty` when the tree has changes), or `unknown`."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_description():
    """The accelerators Keras sees (e.g. `gpu:0`), or the CPU model and core count."""
    from workflows.core.devices import list_devices

    devices = [d for d in list_devices() if not d.lower().startswith("cpu")]
    if devices:
        return ", ".join(devices)
    return f"cpu ({cpu_model()}, {os.cpu_count()} cores)"


def accelerator_model():
    """The first accelerator's model name (e.g. `NVIDIA H100 80GB HBM3`), or None."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        devices = [d for d in jax.devices() if d.platform != "cpu"]
        return devices[0].device_kind if devices else None
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return tf.config.experimental.get_device_details(gpus[0]).get("device_name") \
            if gpus else None
    return None


def command_line():
    """This process's command, as typed: `python -m workflows.translation train ...`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = f"python -m {spec.name}" if spec else f"python {sys.argv[0]}"
    return " ".join([program, *map(shlex.quote, sys.argv[1:])])


def backend_version():
    import keras


    backend = keras.backend.backend()
    module = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}.get(backend)
    return importlib.import_module(module).__version__ if module else None


def run_tags(dataset_fingerprint, **extra):
    """Where and how a run was made: commit, command line, backend and device."""
    import keras


    tags = {"git_commit": git_commit(), "command": command_line(),
            "backend": keras.backend.backend(), "backend_version": backend_version(),
            "device": device_description(), "accelerator": accelerator_model(),
            "dataset_fingerprint": dataset_fingerprint, "keras_version": keras.__version__,
            **extra}
    return {key: value for key, value in tags.items() if value is not None}


def flat_params(config):
    """A dataclass config as MLflow params (values as strings, `None` spelled out): the
    fields that apply to it (`option(applies=...)`), so a run logs only what it read."""
    from workflows.core.config import field_applies

    return {key: str(value) for key, value in dataclasses.asdict(config).items()
            if field_applies(config, key)}


def log_metrics(metrics, step=None):
    """Logs `metrics` to the active run, each under its section of the MLflow UI
    (`metric_groups`): the scores first, the timings apart."""
    import mlflow

    mlflow.log_metrics(grouped(metrics), step=step)


def log_compilations(compiled):
    """What XLA compiled for this session's `fit` calls (JAX): train and test steps, and
    the seconds spent compiling or loading them from the persistent cache."""

    if not compiled.counts:
        return
    metrics = {"train_step_programs": compiled.of("jit(train_step)"),
               "test_step_programs": compiled.of("jit(test_step)"),
               "compile_seconds": compiled.seconds,
               "compile_cache_hits": sum(compiled.cache_hits.values())}
    log_metrics(metrics)
    print(f"Compiled {metrics['train_step_programs']} train step and "
          f"{metrics['test_step_programs']} test step programs in {compiled.seconds:.1f} s "
          f"({metrics['compile_cache_hits']} from the compilation cache)")


def progress_verbosity():
    """Keras progress bars in a terminal; one line per epoch in a log file."""
    return 1 if sys.stdout.isatty() else 2


def child_tags(parent_run_id):
    """Tags that nest a new run under `parent_run_id` in the MLflow UI (none without one)."""
    return {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}


def log_epoch(epoch, metrics, after_epoch=None):

    log_metrics(metrics, step=epoch + 1)
    if after_epoch:
        after_epoch(epoch, metrics)


def log_run_setup(config, params, tags, artifacts, metrics, folder, fingerprint):
    import mlflow

    from workflows.core import precision

    mlflow.log_params({**flat_params(config), **params})
    mlflow.set_tags(run_tags(fingerprint, run_folder=str(folder), **tags))
    if hasattr(config, "dtype_policy"):  # "auto" as this device resolved it
        mlflow.set_tag("dtype_policy_used", precision.resolve_precision(config.dtype_policy))
    mlflow.log_dict(dataclasses.asdict(config), "config.json")
    for name, content in artifacts.items():
        (mlflow.log_dict if isinstance(content, dict) else mlflow.log_text)(content, name)
    if metrics:
        log_metrics(metrics)


def log_missing_epochs(run_id, history):
    """Logs the epochs the run folder has but the run lacks (a crash or an unreachable
    server between a checkpoint and its logging); each epoch is logged once. Returns the
    epochs (1-based) the run now has."""
    import mlflow

    logged = {m.step for m in mlflow.MlflowClient().get_metric_history(run_id, "loss")}
    for epoch, metrics in enumerate(history, start=1):
        if epoch not in logged:
            log_metrics(metrics, step=epoch)
    return logged | set(range(1, len(history) + 1))


def log_training_summary(model, state, curves, monitor="val_loss"):
    """Best epoch (by `monitor`), its validation metrics, mean timings and rates; curves
    and schedule."""
    import keras
    import matplotlib.pyplot as plt
    import mlflow
    import numpy as np

    from workflows.core import figures

    best = state.history[state.best_epoch - 1]
    summary = {"best_epoch": state.best_epoch, "trained_epochs": len(state.history),
               "train_minutes": state.train_seconds / 60,
               "train_wall_minutes": state.wall_seconds / 60}
    if monitor == "val_loss":  # (another monitor's best value is the best epoch's, below)
        summary["best_val_loss"] = state.best_score
    summary.update({f"best_{name}": value for name, value in best.items()
                    if name.startswith("val_") and name != "val_loss"})
    timed = [epoch for epoch in state.history if "epoch_seconds" in epoch]
    rates = sorted({name for epoch in timed for name in epoch if name.endswith("_per_second")})
    for name in ("epoch_seconds", "epoch_wall_seconds", "training_share", *rates):
        values = [epoch[name] for epoch in timed if name in epoch]
        if values:
            summary[f"mean_{name}"] = float(np.mean(values))
        if len(values) > 1 and timed[0] is state.history[0]:  # epoch 1 compiled the steps
            summary[f"steady_{name}"] = float(np.mean(values[1:]))
    logged = ungrouped(mlflow.get_run(mlflow.active_run().info.run_id).data.metrics)
    log_metrics({name: value for name, value in summary.items()  # once per run:
                 if logged.get(name) != value})  # a rerun after a stop adds none
    figure = figures.learning_curves(state.history, curves)
    mlflow.log_figure(figure, "learning_curves.png")
    plt.close(figure)
    schedule = model.optimizer.get_config()["learning_rate"]
    if isinstance(schedule, dict):  # a serialized LearningRateSchedule, not a constant
        schedule = keras.optimizers.schedules.deserialize(schedule)
        mlflow.log_figure(figures.learning_rate_schedule(
            schedule, keras.ops.convert_to_numpy(model.optimizer.iterations),
            type(schedule).__name__), "lr_schedule.png")


def log_datasets(datasets, run_id=None):
    """Logs each `RunDataset` as an input of the active run (or of `run_id`): the runs
    table's Dataset column names it, with its digest, source, context and row count."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    class CountedDataset(MetaDataset):
        """MLflow's dataset of a name, digest and source, with its row count as profile."""

        def __init__(self, dataset):
            with warnings.catch_warnings():  # (a local path: MLflow's two local sources)
                warnings.filterwarnings("ignore", message=".*interpreted in multiple ways")
                source = resolve_dataset_source(dataset.source)
            super().__init__(source, name=dataset.name, digest=dataset.digest)
            self.rows = dataset.rows

        @property
        def profile(self):
            return {"num_rows": self.rows}

        def to_dict(self):
            import json

            return {**super().to_dict(), "profile": json.dumps(self.profile)}

    inputs = [DatasetInput(CountedDataset(dataset)._to_mlflow_entity(),
                           [InputTag("mlflow.data.context", dataset.context)])
              for dataset in datasets]
    if inputs:
        run_id = run_id or mlflow.active_run().info.run_id
        mlflow.MlflowClient().log_inputs(run_id, datasets=inputs)
