"""Command-line pieces shared by the workflows: run selection, `compare`, text input."""

from pathlib import Path

from workflows import tracking
from workflows.config import ConfigError


def add_run_arguments(parser, registered_example):
    """`--run-id` or `--model-uri` (one of them; default: the latest run with a model)."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run-id", help="an MLflow run id or prefix (default: the latest run)")
    which.add_argument("--model-uri", help=f"a registered model, e.g. {registered_example}")


def add_compare_step(steps, default_sort_by, example_sort_by):
    step = steps.add_parser("compare", help="table of this experiment's runs")
    step.add_argument("--sort-by", default=default_sort_by,
                      help=f"an MLflow column, e.g. {example_sort_by}")
    step.add_argument("--ascending", action="store_true")
    step.add_argument("--model", help="only runs of this model")
    step.add_argument("--since", help="only runs started on or after this date")
    step.add_argument("--format", choices=("text", "csv", "markdown"), default="text")
    return step


def add_register_step(steps):
    step = steps.add_parser("register", help="register a run's model in the model registry")
    step.add_argument("name", help="registered model name; each call adds a version")
    step.add_argument("--run-id", help="an MLflow run id or prefix, as `compare` prints it "
                                       "(default: the latest run with a model)")
    step.add_argument("--alias", help="also point this alias at the new version "
                                      "(models:/NAME@ALIAS)")
    return step


def register_run(experiment, run_id, name, alias=None):
    """Registers the model of `run_id` (or of the latest run) as a new version of `name`."""
    run = tracking.find_run(experiment, run_id)
    if run.data.tags.get("model_logged") != "true":
        raise tracking.RunNotFoundError(
            f"Run {run.info.run_id} has no logged model ({run.info.status}); rerun its train "
            "command to finish it, or pick another run from `compare`.")
    return tracking.register_model(run.info.run_id, name, alias)


def compare_runs(experiment, columns, sort_by, model=None, since=None, style="text",
                 ascending=False):
    """Prints an experiment's runs as a table (filtered, sorted); returns the rows."""
    filters = [f"params.model = '{model}'"] if model else []
    if since:
        filters.append(f"attributes.start_time >= {timestamp_ms(since)}")
    rows = tracking.runs_table(experiment, columns, sort_by, ascending, " and ".join(filters))
    for row in rows:
        row["run_id"] = row["run_id"][:12]
    print(tracking.format_table(rows, columns, style) if rows else
          f"No runs in experiment {experiment!r} yet ({tracking.tracking_uri()}).")
    return rows


def timestamp_ms(date):
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(date).timestamp() * 1000)
    except ValueError:
        raise ConfigError(f"--since expects a date like 2026-11-22 or 2026-11-22T10:00, "
                          f"got {date!r}.") from None


def read_texts(texts, file, what):
    """The texts given as arguments plus the non-blank lines of `file` (UTF-8)."""
    texts = list(texts)
    if file:
        texts += [line for line in Path(file).read_text(encoding="utf-8").splitlines()
                  if line.strip()]
    if not texts:
        raise ConfigError(f"Give {what} as arguments or with --file.")
    return texts
