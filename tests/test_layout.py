"""The import graph of the project: no cycles, and dependencies one way (lessons on top,
then lesson packages, then the core, then `data_prep` and `layers`)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("layers", "data_prep", "workflows")
LESSONS = {"workflows.imdb_sentiment", "workflows.translation", "workflows.language_model"}
ENTRY_POINTS = LESSONS | {"workflows.serve_model", "workflows.mlflow_ui"}
LESSON_PACKAGES = ("workflows.sentiment", "workflows.seq2seq", "workflows.causal_lm")


def module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules():
    return {module_name(path): path for package in PACKAGES
            for path in (ROOT / package).rglob("*.py")}


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


def import_graph():
    modules = project_modules()
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


def test_dependencies_run_one_way():
    wrong = []
    for name, imports in import_graph().items():
        for other in imports:
            if (other in ENTRY_POINTS and name != other
                    or within(name, "workflows.core") and not within(other, "workflows.core",
                                                                     "data_prep", "layers")
                    or within(name, *LESSON_PACKAGES) and other in ENTRY_POINTS
                    or within(name, "data_prep") and not within(other, "data_prep")
                    or within(name, "layers") and not within(other, "layers")):
                wrong.append(f"{name} -> {other}")
    assert not wrong, wrong
