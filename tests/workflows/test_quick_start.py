"""`--help` and command-line mistakes answer without loading the heavy libraries."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "keras", "mlflow", "jax", "keras_hub", "gensim", "optuna", "matplotlib")
# Each command line of a module, run in one fresh process one after the other: what any
# of them loads stays loaded, so a heavy library loaded by one case shows in the rest.
PROBE = """
import contextlib, io, json, runpy, sys
module, cases = sys.argv[1], json.loads(sys.argv[2])
results = []
for argv in cases:
    sys.argv, err = [module, *argv], io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module(module, run_name="__main__")
            status = None
        except SystemExit as stop:
            status = stop.code
    results.append({"argv": argv, "status": status, "stderr": err.getvalue(),
                    "loaded": [name for name in HEAVY if name in sys.modules]})
print(json.dumps(results))
""".replace("HEAVY", repr(HEAVY))
HELP = [["--help"], ["train", "--help"], ["evaluate", "--help"]]
MISTAKES = [["train", "--no-such-flag"], ["train", "--set", "no_such_field=1"],
            ["train", "--model", "no_such_model"], ["train", "--set", "seed=-1"]]


def answers(module, cases):
    done = subprocess.run([sys.executable, "-c", PROBE, module, json.dumps(cases)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("lesson", ["imdb_sentiment", "translation", "language_model"])
def test_help_and_mistakes_load_no_heavy_library(lesson):
    for result in answers(f"workflows.{lesson}", HELP + MISTAKES):
        assert result["loaded"] == [], result
        if result["argv"] in HELP:
            assert result["status"] in (0, None), result
        else:
            assert result["status"] == 2, result
            stderr = result["stderr"]
            assert "Traceback" not in stderr and stderr.strip(), result


def test_launchers_help_loads_no_heavy_library():
    for module in ("workflows.serve_model", "workflows.mlflow_ui"):
        (result,) = answers(module, [["--help"]])
        assert (result["status"], result["loaded"]) == (0, []), result


@pytest.mark.integration
def test_a_step_still_loads_what_it_needs():
    (result,) = answers("workflows.translation",
                        [["translate", "--run-id", "0" * 32, "Hello."]])
    assert result["status"] == 2 and "mlflow" in result["loaded"], result


def test_a_step_flags_mistake_answers_before_anything_heavy_loads():
    mistakes = [["evaluate", "--beam-width", "999"], ["evaluate", "--limit", "0"],
                ["translate", "--n-best", "0", "Hi."],
                ["translate", "--length-penalty", "9", "Hi."]]
    for result in answers("workflows.translation", mistakes):
        assert result["loaded"] == [] and result["status"] == 2, result
        assert result["stderr"].startswith("error: --"), result
    for result in answers("workflows.retrieval", [
            ["search", "-k", "0", "vitamin D"],
            ["label", "--file", "q.txt", "--output", "o.jsonl", "--workers", "0"]]):
        assert result["loaded"] == [] and result["status"] == 2, result
        assert result["stderr"].startswith("error: -"), result
    for module, argv in [("imdb_sentiment", ["predict", ""]), ("imdb_sentiment", ["predict"]),
                         ("translation", ["translate"]), ("language_model", ["generate"]),
                         ("retrieval", ["search"])]:
        (result,) = answers(f"workflows.{module}", [argv])
        assert result["loaded"] == [] and result["status"] == 2, result
        assert result["stderr"].startswith("error: Give") or "is empty" in result["stderr"]


def test_the_retrieval_lessons_help_and_mistakes_load_no_heavy_library():
    mistakes = [["train", "--no-such-flag"], ["train", "--set", "no_such_field=1"],
                ["train", "--retriever", "no_such_retriever"], ["train", "--set", "k1=-1"]]
    for result in answers("workflows.retrieval", HELP + mistakes):
        assert result["loaded"] == [], result
        assert result["status"] == (0 if result["argv"] in HELP else 2), result
        if "no_such_retriever" in result["argv"]:
            assert "Unknown --retriever 'no_such_retriever'" in result["stderr"], result


@pytest.mark.parametrize("lesson", ["imdb_sentiment", "translation", "language_model"])
def test_the_shortcuts_of_on_off_fields_are_switches(lesson):
    import importlib
    import typing

    cli = importlib.import_module(f"workflows.{lesson}").CLI
    catalog = cli.lesson.catalog
    configs = [catalog.base(model, preset) for model in catalog.models
               for preset in catalog.presets[model]]
    for name in cli.shortcuts:
        types = {typing.get_type_hints(type(config))[name] for config in configs
                 if name in typing.get_type_hints(type(config))}
        assert types, f"{name}: no config has it"
        assert (types == {bool}) == (name in cli.switches), name
