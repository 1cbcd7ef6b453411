"""Labelled texts from a user's file, for evaluating a sentiment model on them.

Two formats:
- one `text<TAB>label` per line (the last tab separates the label), after an optional
  header line that names the columns (`sentence<TAB>label`, `label<TAB>text`, ...);
- a `.csv` file with a header naming a text column (`text`, `review`, `sentence`
  or `content`) and a label column (`label` or `sentiment`), or the columns given.

Labels are `1`/`0`, `pos`/`neg` or `positive`/`negative` (any case). A bad line is
reported with its number, never skipped in silence.
"""

import csv
import io
from pathlib import Path

import numpy as np

from data_prep.commands import UserError
from data_prep.text import text_lines

LABELS = {"1": 1, "pos": 1, "positive": 1, "0": 0, "neg": 0, "negative": 0}
TEXT_COLUMNS = ("text", "review", "sentence", "content")
LABEL_COLUMNS = ("label", "sentiment")


class LabelledTextsError(UserError):
    """A labelled-texts file that cannot be read as such."""


def read_labelled_texts(path, text_column=None, label_column=None):
    """(texts, labels as an int32 array) from a TSV or CSV file (see the module doc)."""
    path = Path(path)
    content = _read(path)
    rows = _csv_rows if path.suffix.lower() == ".csv" else _tsv_rows
    rows = rows(path, content, text_column, label_column)
    texts, labels = [], []
    for line, text, label in rows:
        if not text.strip():
            raise LabelledTextsError(f"{path}, line {line}: the text is empty.")
        if label.strip().lower() not in LABELS:
            raise LabelledTextsError(
                f"{path}, line {line}: label {label!r} is not one of "
                f"{', '.join(LABELS)}.")
        texts.append(text)
        labels.append(LABELS[label.strip().lower()])
    if not texts:
        raise LabelledTextsError(f"{path} has no labelled texts.")
    return texts, np.array(labels, dtype="int32")


def _read(path):
    try:
        return path.read_text(encoding="utf-8-sig")
    except (FileNotFoundError, IsADirectoryError):
        raise LabelledTextsError(f"{path} is not a file; give a .tsv/.txt (text<TAB>label "
                                 "per line) or .csv file.") from None
    except UnicodeDecodeError as error:
        raise LabelledTextsError(f"{path} is not UTF-8 text ({error.reason} at byte "
                                 f"{error.start}); save it as UTF-8.") from None
    except OSError as error:
        raise LabelledTextsError(f"Cannot read {path}: {error.strerror}.") from None


def _tsv_rows(path, content, text_column, label_column):
    lines = [(number, line) for number, line in enumerate(text_lines(content), start=1)
             if line.strip()]
    header = lines[0][1].split("\t") if lines else []
    if text_column or label_column or _names_columns(header):
        text = header.index(_column(path, header, text_column, TEXT_COLUMNS, "text"))
        label = header.index(_column(path, header, label_column, LABEL_COLUMNS, "label"))
        lines = lines[1:]
    else:
        header, text, label = ["text", "label"], 0, 1
    for number, line in lines:
        fields = _tsv_fields(line, len(header), label)
        if fields is None:
            raise LabelledTextsError(
                f"{path}, line {number}: expected text<TAB>label, found no tab (for a CSV "
                "file, name it .csv)." if "\t" not in line else
                f"{path}, line {number}: expected {len(header)} tab-separated fields.")
        yield number, fields[text], fields[label]


def _names_columns(fields):
    """Whether a first line is a header: it names a text and a label column, and its
    last field is no label."""
    names = {field.strip().lower() for field in fields}
    return bool(names & set(TEXT_COLUMNS) and names & set(LABEL_COLUMNS)
                and fields[-1].strip().lower() not in LABELS)


def _tsv_fields(line, count, label):
    """The fields of `line`, or None if it has too few; with two columns a tab in the
    text stays in it (the label's side of the line is split off)."""
    if count == 2:
        first, tab, rest = line.partition("\t") if label == 0 else line.rpartition("\t")
        return [first, rest] if tab else None
    fields = line.split("\t")
    return fields if len(fields) == count else None


def _csv_rows(path, content, text_column, label_column):
    reader = csv.DictReader(io.StringIO(content, newline=""))
    header = reader.fieldnames or []
    text_column = _column(path, header, text_column, TEXT_COLUMNS, "text")
    label_column = _column(path, header, label_column, LABEL_COLUMNS, "label")
    for row in reader:
        if row.get(text_column) is None or row.get(label_column) is None:
            raise LabelledTextsError(f"{path}, line {reader.line_num}: fewer columns than "
                                     "the header.")
        yield reader.line_num, row[text_column], row[label_column]


def _column(path, header, chosen, candidates, what):
    if chosen:
        if chosen not in header:
            raise LabelledTextsError(f"{path} has no column {chosen!r}; its columns: "
                                     f"{', '.join(header) or 'none'}.")
        return chosen
    found = [name for name in header if name.strip().lower() in candidates]
    if not found:
        raise LabelledTextsError(
            f"{path} has no {what} column (one of {', '.join(candidates)}); its columns: "
            f"{', '.join(header) or 'none'}. Name it with --{what}-column.")
    return found[0]
