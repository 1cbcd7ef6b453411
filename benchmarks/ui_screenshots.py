"""What the MLflow UI shows of the lessons' runs, seen rather than described: each
lesson's tiny runs (generated data, a minute or two in all) in a store of their own,
the UI started on it, and headless Chromium's screenshots of each lesson's runs table
(its Dataset column), of the sentiment runs' chart view and one run's charts (scores
first, timings in a section of their own), of one run's page (its datasets) and of its
system metrics, saved in `docs/images/` for the docs.

    python benchmarks/ui_screenshots.py --folder /tmp/ui   # needs chromium

`--store PATH/mlflow.db` photographs the runs of that store instead of making tiny ones:
the lessons it holds, under the same names (the main job's store, which
`main_job.py --keep` leaves, gives the sentiment pictures of two real runs).
"""

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.workflows.browser import CHROMIUM, rendered  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"


def tiny_runs(folder):
    """Two small runs of each lesson (the contract test's tiny settings), in `folder`."""
    from tests.workflows import test_lesson_contract as contract
    from workflows import imdb_sentiment, language_model, retrieval, translation

    plans = {"imdb_sentiment": (imdb_sentiment, [["--epochs", "2"], ["--epochs", "3"]]),
             "translation": (translation, [["--epochs", "2"], ["--epochs", "3"]]),
             "language_model": (language_model, [["--epochs", "2"], ["--epochs", "3"]]),
             "retrieval": (retrieval, [["--retriever", "bm25"],
                                      ["--retriever", "bm25", "--set", "k1=0.9"]])}
    for name, (module, variants) in plans.items():
        environment, arguments = contract.SETUPS[name](folder)
        os.environ.update(environment)
        for variant in variants:
            given = variant if name == "retrieval" else [*arguments, *variant]
            assert module.main(["train", *given]) == 0
        if name == "imdb_sentiment":  # its latest run's test scores, as the main job's
            assert module.main(["evaluate"]) == 0


def photograph(url, file, shows):
    """Chromium's screenshot of `url` in `file`, taken with a load that shows `shows`
    (8 loads at most: the main job's chart page showed its charts in fewer than half)."""
    try:
        rendered(url, shows, flags=("--hide-scrollbars", f"--screenshot={file}"),
                 window="1500,900", tries=8)
    except AssertionError:
        print(f"warning: {file.name} never showed {shows!r}; kept the last try", file=sys.stderr)


def screenshots(url):
    """Each lesson's runs table, and the first lesson run's page and system metrics."""
    import mlflow

    IMAGES.mkdir(parents=True, exist_ok=True)
    saved = []
    for name in ("imdb_sentiment", "translation", "language_model", "retrieval"):
        experiment = mlflow.get_experiment_by_name(name)
        if experiment is None:  # a store of some lessons only
            continue
        page = f"{url}/#/experiments/{experiment.experiment_id}/runs"
        run = mlflow.search_runs([experiment.experiment_id], output_format="list")[0]
        shots = {f"{name}_runs.png": (page, run.info.run_name)}
        if name == "imdb_sentiment":  # the charts open on the scores, timings apart
            shots["runs_chart_view.png"] = (f"{page}?compareRunsMode=CHART", "best_epoch")
            shots["run_model_metrics.png"] = (f"{page}/{run.info.run_id}/model-metrics",
                                              "best_epoch")
        if name == "translation":
            shots["run_datasets.png"] = (f"{page}/{run.info.run_id}", "git_commit")
            shots["run_system_metrics.png"] = (f"{page}/{run.info.run_id}/system-metrics",
                                               "cpu_utilization")
        for file, (address, shows) in shots.items():
            photograph(address, IMAGES / file, shows)
            saved.append(str((IMAGES / file).relative_to(ROOT)))
    return saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", help="where the tiny runs and their store go")
    parser.add_argument("--store", type=Path, help="an existing store's mlflow.db instead")
    parser.add_argument("--port", type=int, default=5077)
    args = parser.parse_args(argv)
    if (args.folder is None) == (args.store is None):
        parser.error("give --folder (tiny runs) or --store (runs already made)")
    if CHROMIUM is None:
        print("error: headless Chromium is not installed (apt-get install chromium)")
        return 2
    if args.store:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{args.store.resolve()}"
    else:
        folder = Path(args.folder).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        os.environ.update({"NLPKIT_WORK_DIR": str(folder / "work"),
                           "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"})
        tiny_runs(folder)
    ui = subprocess.Popen([sys.executable, "-m", "workflows.mlflow_ui", "--port",
                           str(args.port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)
                break
            except OSError:
                time.sleep(1)
        print("\n".join(screenshots(url)))
    finally:
        os.killpg(ui.pid, 15)
        ui.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
