"""No stale text in the packages' own descriptions: every module a package docstring
names as one of its parts (`name`: what it holds) exists in that package; and the
README stays a short manual."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(path.parent for folder in ("layers", "data_prep", "workflows")
                  for path in (ROOT / folder).rglob("__init__.py"))
NAMED = re.compile(r"((?:`\w+`,\s*)*`\w+`):")  # `a`, `b`: ... names modules a and b


def named_modules(package):
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return {name for group in NAMED.findall(docstring) for name in re.findall(r"`(\w+)`", group)}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_a_package_docstring_names_exists(package):
    missing = {name for name in named_modules(package)
               if not (package / f"{name}.py").exists() and not (package / name).is_dir()}
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py names {sorted(missing)}"


def test_the_rule_reads_the_docstrings_it_checks():
    assert {"text_classifier", "family", "calibration", "pyfunc"} <= named_modules(
        ROOT / "workflows" / "sentiment")


def test_the_readme_is_a_ten_minute_manual():
    """At most 300 lines: the rest belongs in docs/ and benchmarks/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move detail to docs/"


LIMIT = 400  # lines of a module: one concept, read top to bottom
# the modules still over it (issue 86), at their present length: each may only shrink
OVER = {"workflows/imdb_sentiment.py": 485, "workflows/translation.py": 438}


def test_no_module_grows_past_400_lines():
    sizes = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8").count("\n")
             for package in ("layers", "data_prep", "process", "workflows")
             for path in (ROOT / package).rglob("*.py")}
    grown = {name: lines for name, lines in sizes.items()
             if lines > OVER.get(name, LIMIT)}
    assert not grown, f"over {LIMIT} lines (or longer than they were): {grown}"
    shrunk = {name: sizes[name] for name, lines in OVER.items() if sizes[name] < lines}
    assert not shrunk, f"shorter now: lower their entries in OVER (or drop them): {shrunk}"
