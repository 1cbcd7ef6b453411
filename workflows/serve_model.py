"""Serve a logged model over HTTP with MLflow's scoring server (loopback only by default).

    python -m workflows.serve_model models:/imdb-sentiment/latest        # http://127.0.0.1:5001
    python -m workflows.serve_model runs:/<run id>/model --port 5002

Resolves the URI in the project's tracking store (`$MLFLOW_TRACKING_URI` when set, else
`mlflow/mlflow.db`), checks the model's files against the digest recorded when it was
logged, and serves that copy with the current Python environment. POST raw strings to
`/invocations` as `{"inputs": [...]}`; the answer is `{"predictions": [...]}`. Ctrl-C
stops the server and its workers.
"""

import argparse

from process.commands import run_main
from process.errors import run_command
from workflows.core.server_flags import add_model_server_flags, serving_limits


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.serve_model",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("model_uri", help="models:/NAME/latest, models:/NAME@alias, "
                                          "models:/NAME/VERSION or runs:/RUN_ID/model")
    add_model_server_flags(parser)
    args = parser.parse_args(argv)
    from workflows.core.servers import serve

    return run_command(lambda a: serve(a.model_uri, a.host, a.port, a.workers,
                                       serving_limits(a), a.export), args)


if __name__ == "__main__":
    run_main(main)
