"""What a logged model requires, and what MLflow warns of when it loads it."""

import logging


def requirements_and_mismatches(uri):
    """(the package names the model at `uri` requires, MLflow's version-mismatch warnings
    as it loads the model and predicts one text)."""
    import mlflow

    with open(mlflow.pyfunc.get_model_dependencies(uri)) as lines:
        required = {line.split("==")[0] for line in lines.read().split()}
    warned = []
    handler = logging.Handler()
    handler.emit = lambda record: warned.append(record.getMessage())
    logging.getLogger("mlflow").addHandler(handler)
    try:
        mlflow.pyfunc.load_model(uri).predict(["a good film"])
    finally:
        logging.getLogger("mlflow").removeHandler(handler)
    return required, [message for message in warned if "mismatch" in message.lower()]
