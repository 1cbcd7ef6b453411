"""What every benchmark records about the machine, and how it writes its results file."""

import argparse
import json
import os
from pathlib import Path


def machine(**extra):
    """CPU, core count and Keras backend of this run (plus `extra` fields)."""
    import keras

    from process.commands import cpu_model

    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "backend": keras.backend.backend(), **extra}


def write_results(results, output):
    """Prints `results` as JSON and writes them to `output` (folders created), keeping
    the `title` and `record` (the words around the figures, `results_report.py`) of the
    file it replaces."""
    previous = json.loads(Path(output).read_text()) if Path(output).exists() else {}
    kept = {key: previous[key] for key in ("title", "record")
            if isinstance(previous, dict) and key in previous and key not in results}
    text = json.dumps({**kept, **results}, indent=2, ensure_ascii=False)
    print(text)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(text + "\n")
    print(f"Wrote {output}")


def translation_run_parser(script, description):
    """An argument parser with the options every translation benchmark takes: the data,
    the work folder and the run to measure."""
    from data_prep import spa_eng

    parser = argparse.ArgumentParser(prog=f"python benchmarks/{script}", description=description)
    parser.add_argument(spa_eng.SPA_ENG.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--run-id", help="translation run (default: the latest with a model)")
    return parser
