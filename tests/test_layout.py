"""The import graph of the project: no cycles, and dependencies one way (lessons on top,
then lesson packages, then the core, then `data_prep` and `layers`, then `process`)."""

import ast
import shutil
from pathlib import Path

import pytest

from workflows.core.lesson import lesson_names, load_lesson

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("layers", "data_prep", "process", "workflows")
# Every registered lesson (a module of workflows/ that declares LESSON) and its packages
LESSONS = {f"workflows.{name}" for name in lesson_names()}
ENTRY_POINTS = LESSONS | {"workflows.serve_model", "workflows.mlflow_ui"}
LESSON_PACKAGES = tuple(f"workflows.{package}" for name in lesson_names()
                        for package in load_lesson(name).packages)


def module_name(path, root=ROOT):
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root=ROOT):
    return {module_name(path, root): path for package in PACKAGES
            for path in (root / package).rglob("*.py")}


def imported(path, modules):
    """The project modules `path` imports anywhere in it (a function's import counts
    too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name in modules}
    return found


def import_graph(root=ROOT):
    modules = project_modules(root)
    return {name: imported(path, modules) - {name} for name, path in modules.items()}


def within(name, *prefixes):
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_import_graph_has_no_cycles():
    graph, done, path = import_graph(), set(), []

    def visit(name):
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for other in sorted(graph[name]):
            visit(other)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def wrong_way(graph):
    """The imports that run against the layers: lessons on top, then each lesson's
    packages, then the core, then `data_prep` and `layers`, then `process`, which imports
    nothing of the project."""
    wrong = []
    for name, imports in graph.items():
        for other in imports:
            if (other in ENTRY_POINTS and name != other
                    or within(name, "workflows.core") and not within(other, "workflows.core",
                                                                     "data_prep", "layers",
                                                                     "process")
                    or within(name, *LESSON_PACKAGES) and other in ENTRY_POINTS
                    or within(name, "data_prep") and not within(other, "data_prep", "process")
                    or within(name, "layers") and not within(other, "layers", "process")
                    or within(name, "process") and not within(other, "process")):
                wrong.append(f"{name} -> {other}")
    return wrong


def test_dependencies_run_one_way():
    assert not wrong_way(import_graph()), wrong_way(import_graph())


def test_every_lesson_and_package_is_registered():
    """Each registered lesson loads as a `Lesson`, and every package of `workflows/`
    but the core is one lesson's, so the layering above covers it."""
    assert {"imdb_sentiment", "translation", "language_model", "retrieval"} <= set(lesson_names())
    packages = {path.parent.name for path in (ROOT / "workflows").glob("*/__init__.py")}
    owned = [package for name in lesson_names() for package in load_lesson(name).packages]
    assert sorted(owned) == sorted(packages - {"core"})


@pytest.mark.parametrize("package", sorted({p.split(".")[1] for p in LESSON_PACKAGES}))
def test_a_planted_import_of_a_lesson_from_its_package_is_caught(tmp_path, package):
    """A copy of the project where one module of each lesson package imports a lesson:
    the layering check names that arrow."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.npz", "*.json"))
    planted = sorted((tmp_path / "workflows" / package).glob("[!_]*.py"))[0]
    lesson = sorted(LESSONS)[0]
    planted.write_text(planted.read_text() + f"\n\nimport {lesson}  # planted\n")
    assert wrong_way(import_graph(tmp_path)) == [
        f"workflows.{package}.{planted.stem} -> {lesson}"]


# Kit modules a tiny `bilstm` train loads (every layer, every sentiment family's module,
# the serving and export machinery): issue 86 asks for 36. It fails if the count grows.
KIT_MODULES_OF_A_BILSTM_TRAIN = 77
COUNT_KIT_MODULES = """
import os, sys, tempfile
from pathlib import Path
from tests.data_prep.fixtures import write_imdb_folder
root = Path(tempfile.mkdtemp(dir=sys.argv[1]))
data = write_imdb_folder(root / "data", reviews_per_class=12, unlabelled=4).parent
os.environ.update(NLPKIT_WORK_DIR=str(root / "work"), NLPKIT_IMDB_PATH=str(data),
                  MLFLOW_TRACKING_URI=f"sqlite:///{root}/mlflow.db")
before = set(sys.modules)
from workflows import imdb_sentiment
assert imdb_sentiment.main(["train", "--model", "bilstm", "--epochs", "1", "--set",
                            "max_tokens=200", "--set", "batch_size=8", "--set",
                            "embed_dim=4", "--set", "units=2"]) == 0
print(sorted(name for name in set(sys.modules) - before
             if name.split(".")[0] in ("layers", "data_prep", "process", "workflows")))
"""


@pytest.mark.integration
def test_a_tiny_bilstm_train_loads_no_more_kit_modules_than_it_did(tmp_path):
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", COUNT_KIT_MODULES, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert len(loaded) <= KIT_MODULES_OF_A_BILSTM_TRAIN, (len(loaded), loaded)
    assert "workflows.sentiment.rnn" in loaded  # (it trained what it was asked to)
