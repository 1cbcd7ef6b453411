"""The run lifecycle, written once for every lesson.

A lesson supplies what is its own: its configs (`Catalog`), its data, a
`TrainingPlan` (the model, its batches, extra metrics and figures, how the model is
exported) and its evaluation. This module does everything about runs: start or
resume the MLflow run, train resumably, log each epoch, the summary and the learning
curves, export and log the model, mark the run finished; find a run or a model by id,
prefix or URI; register; compare; sweep. What a run logs is `run_logging.py`.
"""

import contextlib
import dataclasses
import sys
import tempfile
from datetime import datetime

import filelock
import keras
import matplotlib.pyplot as plt
import mlflow

from data_prep import cache
from workflows import compilation, distribution, store_health, tracking
from workflows.config import ConfigError, apply_overrides, describe
from workflows.run_logging import (
    add_epoch_metrics,
    check_finite,
    choose_averaged_weights,
    export_and_log_model,
    log_epoch,
    log_missing_epochs,
    log_run_setup,
    log_training_summary,
)
from workflows.training import (
    TrainingFolder,
    fit_resumably,
    remove_partial_files,
    starting_state,
)

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
        experiment = tracking.use_experiment(lesson.experiment)
        print("In the MLflow UI (python -m workflows.mlflow_ui): "
              f"{tracking.runs_table_url(experiment.experiment_id, state.run_id)}")
    return state.run_id


def _check_run_is_in_this_store(run_id, folder):
    if tracking.stored_run(run_id) is None:
        raise tracking.RunNotFoundError(
            f"The run folder {folder} belongs to run {run_id}, which the tracking store "
            f"{tracking.tracking_uri()} does not have: train it again here with --retrain, "
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
    experiment = tracking.use_experiment(lesson.experiment)
    mlflow.start_run(run_id=state.run_id or None, run_name=None if state.run_id else name,
                     experiment_id=experiment.experiment_id, tags=tags or None)
    try:
        yield
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (run_main): stopped, not failed
        mlflow.end_run("KILLED")
        raise
    except BaseException as error:
        if store_health.is_store_failure(error):
            store_health.give_up_on_store()  # ending the run there would wait for nothing
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


def model_run(lesson, run_id=None, model_uri=None, params=None):
    """The run whose model `model_uri` (e.g. `models:/NAME@alias`) is, else the run
    `run_id` (an id or prefix), else the latest run with a model; with `params`
    (config field -> value), the run must have been trained with those values."""
    def accept(run):
        if not params:
            return True
        config = config_of(lesson, run)
        return all(str(getattr(config, name)) == str(value) for name, value in params.items())

    wanted = ", ".join(f"{name} {value}" for name, value in (params or {}).items())
    if model_uri:
        run = tracking.find_run(lesson.experiment, tracking.source_run_id(model_uri))
    else:
        run = best_trial_of(tracking.find_run(lesson.experiment, run_id, accept, wanted))
        model_uri = tracking.model_uri(run.info.run_id)
    if not accept(run):
        raise ConfigError(f"{model_uri} was not trained with {wanted}; pick a run that was "
                          "(see compare), or leave the option out to use this one.")
    params = run.data.params
    print(f"Loading {model_uri} (run {run.info.run_id}, {params.get('model')}"
          + (f", preset {params['preset']})" if "preset" in params else ")"))
    return run


def config_of(lesson, run):
    """The config a run was trained with, from its logged params."""
    return lesson.catalog.from_params(run.data.params)


def log_evaluation(run_id, metrics, dicts=None, figures=None, tables=None):
    """Adds evaluation results to a finished run."""
    with mlflow.start_run(run_id=run_id):
        mlflow.log_metrics(metrics)
        for name, content in (dicts or {}).items():
            mlflow.log_dict(content, name)
        for name, figure in (figures or {}).items():
            mlflow.log_figure(figure, name)
            plt.close(figure)
        for name, table in (tables or {}).items():
            mlflow.log_table(table, name)


def register(lesson, run_id, name, alias=None):
    """Registers the model of `run_id` (or of the latest run) as a new version of `name`."""
    run = check_has_model(best_trial_of(tracking.find_run(lesson.experiment, run_id)))
    return tracking.register_model(run.info.run_id, name, alias)


def best_trial_of(run):
    """A search's or sweep's parent run stands for its best child run; any other run
    for itself."""
    best = run.data.tags.get("best_child_run_id")
    if not best or run.data.tags.get("model_logged") == "true":
        return run
    print(f"Run {run.info.run_id} is a {'search' if 'search' in run.data.tags else 'sweep'}; "
          f"taking its best trial, run {best}.")
    return mlflow.MlflowClient().get_run(best)


def check_has_model(run):
    """`run`, if it logged a model; else a user error saying what to do."""
    if run.data.tags.get("model_logged") != "true":
        raise tracking.RunNotFoundError(
            f"Run {run.info.run_id} has no logged model ({run.info.status}); rerun its train "
            "command to finish it, or pick another run from `compare`.")
    return run


# ## Compare and sweep


def compare(lesson, sort_by=None, model=None, since=None, style="text", ascending=None,
            params=None):
    """Prints the lesson's runs as a table (filtered by model, start date and `params`,
    best first); returns the rows."""
    ascending = lesson.ascending if ascending is None else ascending
    params = {**({"model": model} if model else {}), **(params or {})}
    filters = [f"params.{name} = '{value}'" for name, value in params.items()]
    if since:
        filters.append(f"attributes.start_time >= {timestamp_ms(since)}")
    columns = lesson.compare_columns
    rows = tracking.runs_table(lesson.experiment, columns, sort_by or lesson.sort_by, ascending,
                               " and ".join(filters))
    for row in rows:
        row["run_id"] = row["run_id"][:12]
    print(tracking.format_table(rows, columns, style) if rows else
          f"No runs in experiment {lesson.experiment!r} yet ({tracking.tracking_uri()}).")
    return rows


def timestamp_ms(date):
    try:
        return int(datetime.fromisoformat(date).timestamp() * 1000)
    except ValueError:
        raise ConfigError(f"--since expects a date like 2026-11-22 or 2026-11-22T10:00, "
                          f"got {date!r}.") from None


def sweep(lesson, config, settings, train_one):
    """Runs `train_one(config, parent_run_id)` for each setting under one parent run.

    Every setting is checked before the first child trains. The parent records the
    swept values and, at the end, the child with the lowest `best_val_loss`. Returns
    the child run ids.
    """
    configs = [apply_overrides(config, overrides) for overrides in settings]
    experiment = tracking.use_experiment(lesson.experiment)
    client = mlflow.MlflowClient()
    parent = client.create_run(experiment.experiment_id,
                               run_name=f"sweep-{lesson.run_name(config)}",
                               tags={"sweep": "true", "git_commit": tracking.git_commit()})
    parent_id = parent.info.run_id
    client.log_param(parent_id, "settings", str(settings)[:6000])
    print(f"Sweep: parent run {parent_id}, {len(settings)} settings")
    children, status = [], "FAILED"
    try:
        for overrides, child_config in zip(settings, configs, strict=True):
            print(f"Sweep setting {overrides}")
            children.append(train_one(child_config, parent_id))
        losses = {child: client.get_run(child).data.metrics.get("best_val_loss", float("inf"))
                  for child in children}
        best = min(losses, key=losses.get)
        client.set_tag(parent_id, "best_child_run_id", best)
        client.log_metric(parent_id, "best_val_loss", losses[best])
        status = "FINISHED"
        return children
    finally:
        client.set_terminated(parent_id, status)
