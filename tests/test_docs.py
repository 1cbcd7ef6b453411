"""The docs' Python runs: every block of docs/adding_a_lesson.md is the toy lesson's own
code (which the contract test runs), and the layers doc's model builds as it says. The
blocks that load a logged model run in the tests that train one (`doc_blocks`)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def doc_blocks(name, containing=""):
    """The ```python blocks of the doc `name` (relative to the repository) that contain
    `containing`."""
    text = (ROOT / name).read_text(encoding="utf-8")
    return [block for block in re.findall(r"```python\n(.*?)```", text, flags=re.S)
            if containing in block]


def run_block(block, run_id, scope=None):
    """Runs a doc's block that loads `runs:/<run id>/model`, with a real run's id, in
    `scope` (what the doc's earlier blocks imported)."""
    exec(compile(block.replace("<run id>", run_id), "<doc>", "exec"), dict(scope or {}))


def test_every_block_of_adding_a_lesson_is_the_toy_lessons_own_code():
    toy = (ROOT / "tests" / "workflows" / "toy_lesson.py").read_text(encoding="utf-8")
    blocks = doc_blocks("docs/adding_a_lesson.md")
    assert len(blocks) >= 4
    for block in blocks:
        assert block in toy, f"not in toy_lesson.py, word for word:\n{block}"


def test_the_layers_doc_s_translator_in_a_dozen_lines_builds():
    (block,) = doc_blocks("docs/layers.md", "TransformerDecoder")
    scope = {}
    exec(compile(block, "docs/layers.md", "exec"), scope)
    assert scope["model"].output.shape == (None, None, 15000)


def test_each_lesson_docs_settings_tables_are_the_codes():
    """`docs/<lesson>.md`'s tables of settings are written from the fields' `option(help=)`:
    a field added, changed or documented differently fails here until
    `python -m workflows.core.settings_docs` writes them again."""
    from workflows.core import settings_docs

    assert not settings_docs.stale_docs(), "run: python -m workflows.core.settings_docs"
