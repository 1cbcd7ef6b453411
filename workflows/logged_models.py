"""Using what a lesson's runs logged: a verified pyfunc model, checked inputs, chunked
predictions with progress, and where the runs are."""

import mlflow
import numpy as np

from data_prep import cache
from data_prep.progress import Progress
from workflows import tracking
from workflows.config import ConfigError


def load_pyfunc(run):
    """The pyfunc model `run` logged, its files checked against the digest it recorded
    (downloaded to a temporary folder: it is in memory once loaded)."""
    with tracking.verified_model(run) as local:
        return mlflow.pyfunc.load_model(str(local))


def check_texts(texts, what):
    """Refuses an empty list (a user error) or items that are not strings (a bug)."""
    if not texts:
        raise ConfigError(f"Give at least one {what}.")
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise TypeError(f"{what.capitalize()}s must be strings; items {bad[:10]} are not.")


def predict_in_chunks(model, texts, label, chunk_size=2048):
    """`model.predict(texts)` chunk by chunk, showing progress; a flat numpy array."""
    outputs = []
    with Progress(label, len(texts)) as progress:
        for start in range(0, len(texts), chunk_size):
            chunk = texts[start:start + chunk_size]
            outputs.extend(np.asarray(model.predict(chunk)).reshape(-1).tolist())
            progress.advance(len(chunk))
    return np.asarray(outputs)


def print_where_results_are(lesson, work_dir=None):
    experiment = tracking.use_experiment(lesson.experiment)
    print(f"\nRun folders: {cache.work_dir(work_dir) / 'runs' / lesson.experiment}\n"
          f"MLflow store: {tracking.tracking_uri()}\n"
          "Compare the runs in the MLflow UI: python -m workflows.mlflow_ui, then open "
          f"{tracking.runs_table_url(experiment.experiment_id)}")
