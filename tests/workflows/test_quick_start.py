"""`--help` and command-line mistakes answer without loading the heavy libraries."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "keras", "mlflow", "jax", "keras_hub", "gensim", "optuna", "matplotlib")
PROBE = """
import json, runpy, sys
module, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = module
try:
    runpy.run_module(module, run_name="__main__")
except SystemExit as stop:
    status = stop.code
from data_prep.runtime import loaded
print(json.dumps({"status": status, "loaded": [name for name in HEAVY if loaded(name)]}))
""".replace("HEAVY", repr(HEAVY))


def answer(*argv):
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("lesson", ["imdb_sentiment", "translation", "language_model"])
@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["evaluate", "--help"],
                                  ["train", "--no-such-flag"],
                                  ["train", "--set", "no_such_field=1"],
                                  ["train", "--model", "no_such_model"]])
def test_help_and_mistakes_load_no_heavy_library(lesson, argv):
    result, stderr = answer(f"workflows.{lesson}", *argv)
    assert result["loaded"] == [], result
    if argv[-1] == "--help":
        assert result["status"] in (0, None)
    else:
        assert result["status"] == 2
        assert "Traceback" not in stderr and stderr.strip(), stderr


@pytest.mark.parametrize("module", ["workflows.serve_model", "workflows.mlflow_ui"])
def test_launchers_help_loads_no_heavy_library(module):
    result, _ = answer(module, "--help")
    assert result == {"status": 0, "loaded": []}


def test_a_step_still_loads_what_it_needs():
    result, stderr = answer("workflows.translation", "translate", "--run-id", "0" * 32,
                            "Hello.")
    assert result["status"] == 2 and "mlflow" in result["loaded"], (result, stderr)
