"""A run and its training, written once for every lesson.

A lesson supplies what is its own: its configs (`Catalog`), its data, a
`TrainingPlan` (the model, its batches, extra metrics and figures, how the model is
exported). `train` does the rest: start or resume the MLflow run (with several
processes: the chief writes, the others train in step), fit resumably
(`checkpoints.py`), log the setup, each epoch (and those a crash left unlogged), the
summary, curves and schedule, choose between the best epoch and the average of the last
ones, refuse non-finite weights, export and log the model, mark the run finished.
"""

import contextlib
import dataclasses
import sys
import tempfile

import filelock
import keras
import matplotlib.pyplot as plt
import mlflow
import numpy as np

from data_prep import cache
from data_prep.errors import UserError
from workflows.core import compilation, distribution, figures, precision, store
from workflows.core.checkpoints import (
    TrainingFolder,
    average_weights,
    fit_resumably,
    remove_partial_files,
    starting_state,
)
from workflows.core.config import describe
from workflows.core.models import export_and_log_model
from workflows.core.runs import RunNotFoundError, stored_run

# ## Train


def run_folder(lesson, config, fingerprint, work_dir=None):
    """`work/runs/<experiment>/<run name>-<hash of config and data>`; where it trains
    (`distribution`) is not part of it, so a run resumes on other devices."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k != "distribution"}
    key = cache.settings_key({"config": fields, "data": fingerprint})
    return (cache.work_dir(work_dir) / "runs" / lesson.experiment
            / f"{lesson.run_name(config)}-{key}")


def train(lesson, config, data_path=None, work_dir=None, retrain=False, parent_run_id=None, *,
          tags=None, after_epoch=None):
    """Trains `config` (or resumes it, or reuses a finished run); returns the MLflow run id.

    A new run is nested under `parent_run_id` and gets `tags`; `after_epoch(epoch,
    metrics)` is called once each epoch is checkpointed and logged (a search's pruner).
    With several processes, every process calls this; only the chief (process 0) writes
    the run folder and the store, and the others return its run id.
    """
    distribution.check(config.distribution)  # before any data is read
    compilation.use_persistent_cache(work_dir)
    processes = distribution.join_processes(config.distribution)
    data = processes.chief_first(lambda: lesson.load_data(config, data_path, work_dir))
    folder = run_folder(lesson, config, data.fingerprint, work_dir)
    lock = training_lock(folder) if processes.is_chief else contextlib.nullcontext()
    with distribution.placed(config.distribution) as placement, lock:
        run_tags = {**(child_tags(parent_run_id) or {}), **(tags or {})}
        run_id = _train_in(lesson, config, data, folder, retrain, run_tags, after_epoch,
                           placement)
    processes.leave()
    return run_id


@contextlib.contextmanager
def training_lock(folder):
    """Only one process trains a run folder at a time. A second one (the same `train`
    started twice, two sweeps that share a setting) waits, then reuses the run."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(folder.parent / f".{folder.name}.lock")
    try:
        lock.acquire(blocking=False)
    except filelock.Timeout:
        print(f"Another process is training this exact config ({folder}); waiting for it "
              "to finish (Ctrl-C to stop waiting)...", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _train_in(lesson, config, data, folder, retrain, run_tags, after_epoch, placement):
    name, processes = lesson.run_name(config), placement.processes
    state = processes.chief_first(lambda: _starting_state(folder, retrain, processes))
    if state.run_id and processes.is_chief:
        _check_run_is_in_this_store(state.run_id, folder)
    if state.finished:
        print(f"{name} with this config is already trained: run {state.run_id} ({folder}). "
              "Pass --retrain to train it again.")
        return state.run_id
    print(f"Training {name} on {len(placement.devices)} device(s)"
          + (f" of {processes.count} processes" if processes.count > 1 else "")
          + f":\n{describe(config)}")
    keras.utils.set_random_seed(config.seed)
    plan = lesson.plan_training(config, data)  # may look up runs of other experiments
    print(f"{plan.model.count_params():,} parameters")
    with _chief_run(lesson, name, state, run_tags, processes), \
            _training_folder(folder, processes) as training_folder:
        if processes.is_chief:
            start_logging(config, plan, data.fingerprint, folder, state, placement)
        with compilation.Compilations() as compiled:
            state = fit_resumably(
                plan.model, lambda epoch: placement.batches(plan.train_batches(epoch)),
                placement.batches(plan.validation_batches), training_folder, config.epochs,
                config.patience, config.checkpoint_every_steps,
                train_examples=plan.train_examples,
                epoch_metrics=lambda epoch, metrics: add_epoch_metrics(plan, epoch, metrics),
                on_epoch_end=(lambda epoch, metrics: log_epoch(epoch, metrics, after_epoch))
                if processes.is_chief else None,
                verbose=progress_verbosity() if processes.is_chief else 0,
                time_budget_seconds=plan.time_budget_seconds,
                keep_epoch_weights=plan.average_last_epochs, agree=processes.chiefs_word)
        if processes.is_chief:
            log_training_summary(plan, state)
            log_compilations(compiled)
        if plan.average_last_epochs > 1:
            choose_averaged_weights(plan, placement, training_folder, state)
        check_finite(plan, placement)
        export_and_log_model(plan.export, training_folder.output, log=processes.is_chief)
        if processes.is_chief:
            TrainingFolder(folder).mark_finished(state)
    processes.barrier("finished")
    if not processes.is_chief:  # its own state never had the chief's run id
        state = TrainingFolder(folder).load_state()
    print(f"Run {state.run_id}: best val_loss {state.best_val_loss:.4f} at epoch "
          f"{state.best_epoch}, {state.train_seconds / 60:.1f} training minutes; model in "
          f"{folder / plan.export.artifact}")
    if processes.is_chief:
        experiment = store.use_experiment(lesson.experiment)
        print("In the MLflow UI (python -m workflows.mlflow_ui): "
              f"{store.runs_table_url(experiment.experiment_id, state.run_id)}")
    return state.run_id


def _check_run_is_in_this_store(run_id, folder):
    if stored_run(run_id) is None:
        raise RunNotFoundError(
            f"The run folder {folder} belongs to run {run_id}, which the tracking store "
            f"{store.tracking_uri()} does not have: train it again here with --retrain, "
            "or set MLFLOW_TRACKING_URI to the store that has it.")


def log_compilations(compiled):
    """What XLA compiled for this session's `fit` calls (JAX): train and test steps, and
    the seconds spent compiling or loading them from the persistent cache."""
    if not compiled.counts:
        return
    metrics = {"train_step_programs": compiled.of("jit(train_step)"),
               "test_step_programs": compiled.of("jit(test_step)"),
               "compile_seconds": compiled.seconds,
               "compile_cache_hits": sum(compiled.cache_hits.values())}
    mlflow.log_metrics(metrics)
    print(f"Compiled {metrics['train_step_programs']} train step and "
          f"{metrics['test_step_programs']} test step programs in {compiled.seconds:.1f} s "
          f"({metrics['compile_cache_hits']} from the compilation cache)")


def _starting_state(folder, retrain, processes):
    """The run folder's state; the chief first clears it (`retrain`) and its partial
    files."""
    if processes.is_chief:
        state = starting_state(folder, retrain)
        remove_partial_files(folder)
        return state
    return TrainingFolder(folder).load_state()


@contextlib.contextmanager
def _chief_run(lesson, name, state, tags, processes):
    """The chief starts (or resumes) the MLflow run; the other processes log nothing."""
    if not processes.is_chief:
        yield
        return
    with tracked_run(lesson.experiment, name, state.run_id, tags):
        yield


@contextlib.contextmanager
def tracked_run(experiment_name, name, run_id=None, tags=None):
    """The MLflow run `run_id` resumed, or a new run `name`: ended FINISHED, KILLED on
    Ctrl-C or SIGTERM, FAILED on an error (without waiting on a store that is down)."""
    experiment = store.use_experiment(experiment_name)
    mlflow.start_run(run_id=run_id or None, run_name=None if run_id else name,
                     experiment_id=experiment.experiment_id, tags=tags or None)
    try:
        yield
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (run_main): stopped, not failed
        mlflow.end_run("KILLED")
        raise
    except BaseException as error:
        if store.is_store_failure(error):
            store.give_up_on_store()  # ending the run there would wait for nothing
            with contextlib.suppress(Exception):
                mlflow.end_run("FAILED")
        else:
            mlflow.end_run("FAILED")
        raise
    mlflow.end_run()


@contextlib.contextmanager
def _training_folder(folder, processes):
    """The run folder as this process trains in it: the chief writes it; another
    process reads it and writes to a scratch folder, removed at the end."""
    if processes.count == 1:
        yield TrainingFolder(folder)
        return
    with tempfile.TemporaryDirectory(prefix="nlpkit-process-") as scratch:
        yield TrainingFolder(folder, None if processes.is_chief else scratch,
                             processes.barrier)


def start_logging(config, plan, fingerprint, folder, state, placement):
    """A new run logs its setup; a resumed one, the epochs it missed."""
    if state.run_id:
        print(f"Resuming run {state.run_id} from {folder}")
        log_missing_epochs(state.run_id, state.history)
        return
    log_run_setup(config, plan, fingerprint, folder)
    mlflow.set_tag("devices", ", ".join(map(str, placement.devices)))
    state.run_id = mlflow.active_run().info.run_id
    TrainingFolder(folder).save_state(state)


def progress_verbosity():
    """Keras progress bars in a terminal; one line per epoch in a log file."""
    return 1 if sys.stdout.isatty() else 2


def child_tags(parent_run_id):
    """Tags that nest a new run under `parent_run_id` in the MLflow UI (none if None)."""
    return {"mlflow.parentRunId": parent_run_id} if parent_run_id else None


# ## Find, evaluate and register


# ## What a run logs, and which weights it exports


def log_epoch(epoch, metrics, after_epoch=None):
    mlflow.log_metrics(metrics, step=epoch + 1)
    if after_epoch:
        after_epoch(epoch, metrics)


def log_run_setup(config, plan, fingerprint, folder):
    mlflow.log_params({**store.flat_params(config), **plan.params})
    mlflow.set_tags(store.run_tags(fingerprint, run_folder=str(folder), **plan.tags))
    if hasattr(config, "dtype_policy"):  # "auto" as this device resolved it
        mlflow.set_tag("dtype_policy_used", precision.resolve(config.dtype_policy))
    mlflow.log_dict(dataclasses.asdict(config), "config.json")
    for name, content in plan.artifacts.items():
        (mlflow.log_dict if isinstance(content, dict) else mlflow.log_text)(content, name)
    if plan.metrics:
        mlflow.log_metrics(plan.metrics)


def add_epoch_metrics(plan, epoch, metrics):
    """The lesson's own epoch metrics and the learning rate, before the checkpoint."""
    if plan.epoch_end:
        plan.epoch_end(epoch, metrics)
    metrics["learning_rate"] = float(keras.ops.convert_to_numpy(plan.model.optimizer.learning_rate))


def log_missing_epochs(run_id, history):
    """Logs the epochs the run folder has but the run lacks (a crash or an unreachable
    server between a checkpoint and its logging); each epoch is logged once."""
    logged = {m.step for m in mlflow.MlflowClient().get_metric_history(run_id, "loss")}
    for epoch, metrics in enumerate(history, start=1):
        if epoch not in logged:
            mlflow.log_metrics(metrics, step=epoch)


def log_training_summary(plan, state):
    """Best epoch, its validation metrics, mean timings and rates; curves and schedule."""
    best = state.history[state.best_epoch - 1]
    summary = {"best_epoch": state.best_epoch, "trained_epochs": len(state.history),
               "best_val_loss": state.best_val_loss, "train_minutes": state.train_seconds / 60}
    summary.update({f"best_{name}": value for name, value in best.items()
                    if name.startswith("val_") and name != "val_loss"})
    timed = [epoch for epoch in state.history if "epoch_seconds" in epoch]
    rates = sorted({name for epoch in timed for name in epoch if name.endswith("_per_second")})
    for name in ("epoch_seconds", *rates):
        values = [epoch[name] for epoch in timed if name in epoch]
        if values:
            summary[f"mean_{name}"] = float(np.mean(values))
        if len(values) > 1 and timed[0] is state.history[0]:  # epoch 1 compiled the steps
            summary[f"steady_{name}"] = float(np.mean(values[1:]))
    mlflow.log_metrics(summary)
    curves = figures.learning_curves(state.history, plan.curves)
    mlflow.log_figure(curves, "learning_curves.png")
    plt.close(curves)
    schedule = plan.model.optimizer.get_config()["learning_rate"]
    if isinstance(schedule, dict):  # a serialized LearningRateSchedule, not a constant
        schedule = keras.optimizers.schedules.deserialize(schedule)
        mlflow.log_figure(figures.learning_rate_schedule(
            schedule, keras.ops.convert_to_numpy(plan.model.optimizer.iterations),
            type(schedule).__name__), "lr_schedule.png")


def choose_averaged_weights(plan, placement, folder, state):
    """Checkpoint averaging: the mean of the last epochs' weights replaces the best
    epoch's (which the model holds) when its validation loss is lower. The chief logs
    both (`averaged_val_*` beside `best_val_*`) and an `exported_weights` tag saying
    which won. `folder` is the `TrainingFolder` the run trained in."""
    choice, metrics = _average_if_better(plan, placement, folder, state)
    if placement.processes.is_chief:
        mlflow.log_metrics({f"averaged_{name}": value for name, value in metrics.items()
                            if name.startswith("val_")})
        mlflow.set_tag("exported_weights", choice)


def _average_if_better(plan, placement, folder, state):
    """Loads the average of the last epochs if its validation loss beats the best
    epoch's; returns what the model holds and the average's validation metrics."""
    epochs = folder.intact_epoch_weights(
        range(max(state.epoch - plan.average_last_epochs + 1, 1), state.epoch + 1), state)
    if len(epochs) < 2:
        return f"best epoch {state.best_epoch} (fewer than two epochs to average)", {}
    average_weights(plan.model, [folder.epoch_weights(epoch) for epoch in epochs])
    metrics = {"val_loss": plan.model.evaluate(placement.batches(plan.validation_batches),
                                               verbose=0, return_dict=True)["loss"]}
    if plan.epoch_end:
        plan.epoch_end(state.epoch, metrics)
    span = f"epochs {epochs[0]}-{epochs[-1]}"
    if metrics["val_loss"] < state.best_val_loss:
        print(f"Exporting the average of {span}: val_loss {metrics['val_loss']:.4f} < "
              f"{state.best_val_loss:.4f} (best epoch {state.best_epoch})")
        return f"average of {span}", metrics
    folder.load_best_weights(plan.model, state)
    print(f"Keeping the best epoch {state.best_epoch}: the average of {span} has val_loss "
          f"{metrics['val_loss']:.4f} >= {state.best_val_loss:.4f}")
    return f"best epoch {state.best_epoch}", metrics


class ExportError(UserError):
    """A trained model that must not leave its run (non-finite weights or outputs)."""


def check_finite(plan, placement):
    """Refuses, in one line, to export a model whose weights or outputs are not finite:
    every weight is checked, and the model is evaluated on one validation batch."""
    for variable in plan.model.weights:
        if "float" in str(variable.dtype):
            value = keras.ops.convert_to_numpy(variable.value)
            if not np.isfinite(value).all():
                raise ExportError(f"The trained weight {variable.path} holds NaN or infinite "
                                  f"values: nothing was exported or logged. {RETRAIN_HINT}")
    loss = plan.model.evaluate(placement.batches(plan.validation_batches), steps=1, verbose=0,
                               return_dict=True)["loss"]
    if not np.isfinite(loss):
        raise ExportError(f"The trained model's loss on a validation batch is {loss}: nothing "
                          f"was exported or logged. {RETRAIN_HINT}")


RETRAIN_HINT = ("Train it again with --retrain (a lower --set learning_rate=... if the loss "
                "diverged).")
