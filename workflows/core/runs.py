"""Finding and comparing runs: a run by id, prefix, model URI or a lesson's filters;
its config; evaluations logged back to it; the registry; the runs table, best first."""

import csv
import io
import tempfile
from datetime import datetime
from pathlib import Path

import mlflow
import numpy as np

from data_prep import cache
from process.errors import UserError
from workflows.core import models, tracking
from workflows.core.config import ConfigError
from workflows.core.metric_groups import ungrouped_columns
from workflows.core.store import (
    existing_experiment,
    opened_store,
    quiet_mlflow,
    runs_table_url,
    tracking_uri,
    use_experiment,
)


class RunNotFoundError(UserError):
    """No MLflow run matches what the user asked for."""


def register_model(run_id, name, alias=None):
    """Registers the run's model as a new version of `name` (and `alias`); returns the
    version. A run of another store, or without a logged model, registers nothing."""
    run = stored_run(run_id)
    if run is None or run.data.tags.get("model_logged") != "true":
        raise RunNotFoundError(
            f"Run {run_id} {'is not in' if run is None else 'has no logged model in'} the "
            f"tracking store {tracking_uri()}: nothing was registered. Point "
            "MLFLOW_TRACKING_URI at the store that has it, or train it there.")
    version = mlflow.register_model(models.model_uri(run_id), name)
    also = [f"models:/{name}/latest"]
    if alias:
        mlflow.MlflowClient().set_registered_model_alias(name, alias, version.version)
        also.append(f"models:/{name}@{alias}")
    print(f"Registered {name} version {version.version}: models:/{name}/{version.version} "
          f"(also {', '.join(also)})")
    return version.version


def stored_run(run_id):
    """The run `run_id` of the current tracking store, or None if the store has none."""
    quiet_mlflow()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with opened_store(uri):
        try:
            return mlflow.MlflowClient().get_run(run_id)
        except mlflow.exceptions.MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise


def find_run(experiment_name, run_id=None, accept=None, wanted=""):
    """The run `run_id`, or the latest finished run that logged a model (and, given the
    predicate `accept`, that it accepts; `wanted` says which in the error).

    Raises `RunNotFoundError` (a user error) when nothing or several runs match.
    """
    if run_id is not None and not run_id.strip():
        raise RunNotFoundError("--run-id is empty; give a run id or its first characters, "
                               "as the compare step prints them.")
    experiment = existing_experiment(experiment_name)
    runs = [] if experiment is None else mlflow.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"],
        output_format="list")
    with_model = [run for run in runs if run.data.tags.get("model_logged") == "true"
                  and (accept is None or accept(run))]
    if run_id is None and with_model:
        return with_model[0]
    matches = [run for run in runs if run.info.run_id.startswith(run_id or "\0")]
    if len(matches) == 1:
        return matches[0]
    if run_id:
        raise RunNotFoundError(f"No run matches --run-id {run_id!r} in experiment "
                               f"{experiment_name!r} ({tracking_uri()}); {len(runs)} run(s) "
                               f"there: python -m workflows.{experiment_name} compare lists them.")
    raise RunNotFoundError(f"No trained model{' ' + wanted if wanted else ''} yet in "
                           f"{tracking_uri()}; train one first: python -m "
                           f"workflows.{experiment_name} train (--help shows the options).")


def runs_table(experiment_name, columns, sort_by, ascending=False, filter_string=""):
    """Rows (dicts) for `columns` of an experiment's runs, sorted by `sort_by`.

    Column names are MLflow's: `params.x`, `metrics.y`, `tags.z`, or run attributes
    (`run_id`, `start_time`, `status`); missing values are empty strings.
    """
    experiment = mlflow.get_experiment_by_name(experiment_name)  # reading creates nothing
    if experiment is None:
        return []
    frame = ungrouped_columns(mlflow.search_runs([experiment.experiment_id],
                                                 filter_string=filter_string))
    if frame.empty:
        return []
    if sort_by in frame:
        frame = frame.sort_values(sort_by, ascending=ascending, na_position="last")
    rows = []
    for _, record in frame.iterrows():
        rows.append({column: _cell(record.get(column)) for column in columns})
    return rows


def _cell(value):
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M")
    return str(value)


def format_table(rows, columns, style="text"):
    """`rows` as an aligned text table, CSV or a Markdown table."""
    headers = [column.split(".", 1)[-1] for column in columns]
    if style == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(headers)
        writer.writerows([[row[c] for c in columns] for row in rows])
        return buffer.getvalue().rstrip("\n")
    if style == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
        lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max([len(header)] + [len(row[column]) for row in rows])
              for header, column in zip(headers, columns, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(row[c].ljust(w) for c, w in zip(columns, widths, strict=True))
              for row in rows]
    return "\n".join(lines)


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
        run = find_run(lesson.experiment, source_run_id(model_uri))
    else:
        run = best_trial_of(find_run(lesson.experiment, run_id, accept, wanted))
        model_uri = models.model_uri(run.info.run_id)
    if not accept(run):
        raise ConfigError(f"{model_uri} was not trained with {wanted}; pick a run that was "
                          "(see compare), or leave the option out to use this one.")
    params = run.data.params
    print(f"Loading {model_uri} (run {run.info.run_id}, {params.get(lesson.catalog.key)}"
          + (f", preset {params['preset']})" if "preset" in params else ")"))
    return run


def config_of(lesson, run):
    """The config a run was trained with, from its logged params."""
    return lesson.catalog.from_params(run.data.params)


def log_evaluation(run_id, metrics, dicts=None, figures=None, tables=None, arrays=None):
    """Adds evaluation results to a finished run (`arrays`: name -> a dict of numpy arrays,
    logged as a `.npz` file)."""
    import matplotlib.pyplot as plt  # not for the launchers' --help

    with mlflow.start_run(run_id=run_id):
        tracking.log_metrics(metrics)
        for name, content in (arrays or {}).items():
            with tempfile.TemporaryDirectory() as folder:
                np.savez_compressed(Path(folder) / name, **content)
                mlflow.log_artifact(str(Path(folder) / name))
        for name, content in (dicts or {}).items():
            mlflow.log_dict(content, name)
        for name, figure in (figures or {}).items():
            mlflow.log_figure(figure, name)
            plt.close(figure)
        for name, table in (tables or {}).items():
            mlflow.log_table(table, name)


def register(lesson, run_id, name, alias=None):
    """Registers the model of `run_id` (or of the latest run) as a new version of `name`."""
    run = check_has_model(best_trial_of(find_run(lesson.experiment, run_id)))
    return register_model(run.info.run_id, name, alias)


def best_trial_of(run):
    """A study's parent run (`tune`, `train --sweep`) stands for its best child run; any
    other run for itself."""
    best = run.data.tags.get("best_child_run_id")
    if not best or run.data.tags.get("model_logged") == "true":
        return run
    print(f"Run {run.info.run_id} is a study's parent run; taking its best trial, run {best}.")
    return mlflow.MlflowClient().get_run(best)


def check_has_model(run):
    """`run`, if it logged a model; else a user error saying what to do."""
    if run.data.tags.get("model_logged") != "true":
        raise RunNotFoundError(
            f"Run {run.info.run_id} has no logged model ({run.info.status}); rerun its train "
            "command to finish it, or pick another run from `compare`.")
    return run


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
    rows = runs_table(lesson.experiment, columns, sort_by or lesson.sort_by, ascending,
                      " and ".join(filters))
    for row in rows:
        row["run_id"] = row["run_id"][:12]
    print(format_table(rows, columns, style) if rows else
          f"No runs in experiment {lesson.experiment!r} yet ({tracking_uri()}).")
    return rows


def timestamp_ms(date):
    try:
        return int(datetime.fromisoformat(date).timestamp() * 1000)
    except ValueError:
        raise ConfigError(f"--since expects a date like 2026-11-22 or 2026-11-22T10:00, "
                          f"got {date!r}.") from None


def print_where_results_are(lesson, work_dir=None):
    experiment = use_experiment(lesson.experiment)
    print(f"\nRun folders: {cache.work_dir(work_dir) / 'runs' / lesson.experiment}\n"
          f"MLflow store: {tracking_uri()}\n"
          "Compare the runs in the MLflow UI: python -m workflows.mlflow_ui, then open "
          f"{runs_table_url(experiment.experiment_id)}")


def source_run_id(uri):
    """The run that logged the model at `uri` (`runs:/...` or `models:/NAME/...`)."""
    try:
        return mlflow.models.get_model_info(uri).run_id
    except mlflow.exceptions.MlflowException as error:
        raise RunNotFoundError(f"No model at {uri} ({tracking_uri()}): "
                               f"{error.message.splitlines()[0]}") from None
