"""Each lesson doc's tables of settings, written from the fields' own `option(help=...)`:
the one source `--help` and the `settings` step read too. A test fails when a doc and the
code differ; this rewrites them:

    python -m workflows.core.settings_docs              # rewrite docs/<lesson>.md tables
    python -m workflows.core.settings_docs --check      # exit 1 if any is out of date

The tables sit between `<!-- settings: begin -->` and `<!-- settings: end -->` in
`docs/<lesson>.md`: the training options every model shares, then each model's own fields
(at its default preset), with default, what the field accepts and its help.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from workflows.core.config import TrainingOptions
from workflows.core.lesson import lesson_names, load_lesson
from workflows.core.step_inputs import accepted_values

DOCS = Path(__file__).resolve().parents[2] / "docs"
BEGIN, END = "<!-- settings: begin -->", "<!-- settings: end -->"
SHARED = {field.name for field in dataclasses.fields(TrainingOptions)}


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows):
    lines = ["| field | default | accepts | what it does |", "| --- | --- | --- | --- |"]
    lines += [f"| `{name}` | `{cell(default)}` | {cell(accepts)} | {cell(text)} |"
              for name, default, accepts, text in rows]
    return "\n".join(lines)


def field_rows(config, names=None):
    return [(item.name, getattr(config, item.name), accepted_values(item), item.metadata["help"])
            for item in dataclasses.fields(config) if item.metadata.get("help")
            and (names is None or item.name in names)]


def settings_section(lesson):
    """The Markdown between the markers for `lesson`."""
    catalog = lesson.catalog
    first = catalog.base(catalog.models[0], next(iter(catalog.presets[catalog.models[0]])))
    parts = ["Generated from the code by `python -m workflows.core.settings_docs`; every "
             "field is set with `--set NAME=VALUE` (`settings --model M` prints the values "
             "of one model and preset).", "",
             f"**Training, shared by every model** (the defaults of `{catalog.models[0]}`; "
             "a model that changes one lists it under its own)", "",
             table(field_rows(first, SHARED))]
    for model in catalog.models:
        preset = next(iter(catalog.presets[model]))
        config = catalog.base(model, preset)
        own = {item.name for item in dataclasses.fields(config)
               if item.name not in SHARED or getattr(config, item.name)
               != getattr(first, item.name)}
        label = f"`{model}`" + (f" (preset `{preset}`)" if catalog.has_presets else "")
        parts += ["", f"**{label}**", "", table(field_rows(config, own))]
    return "\n".join(parts)


def doc_of(name):
    return DOCS / f"{name}.md"


def updated(text, section):
    """`text` with its settings section replaced (appended, with a heading, if absent)."""
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        return f"{before}{BEGIN}\n{section}\n{END}{rest.split(END, 1)[1]}"
    return f"{text.rstrip()}\n\n## Every setting\n\n{BEGIN}\n{section}\n{END}\n"


def stale_docs():
    """`{doc path: its up-to-date text}` of the lesson docs that differ from the code."""
    stale = {}
    for name in lesson_names():
        path = doc_of(name)
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        new = updated(text, settings_section(load_lesson(name)))
        if new != text:
            stale[path] = new
    return stale


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.core.settings_docs",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a doc is stale")
    args = parser.parse_args(argv)
    stale = stale_docs()
    for path, text in stale.items():
        if args.check:
            print(f"{path} is out of date: python -m workflows.core.settings_docs")
        else:
            path.write_text(text, encoding="utf-8")
            print(f"Wrote the settings of {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
