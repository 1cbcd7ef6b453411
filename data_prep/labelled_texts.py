"""Labelled texts from a user's file, for evaluating a sentiment model on them.

Two formats:
- one `text<TAB>label` per line (the last tab separates the label);
- a `.csv` file with a header naming a text column (`text`, `review`, `sentence`
  or `content`) and a label column (`label` or `sentiment`), or the columns given.

Labels are `1`/`0`, `pos`/`neg` or `positive`/`negative` (any case). A bad line is
reported with its number, never skipped in silence.
"""

import csv
from pathlib import Path

import numpy as np

from data_prep.errors import UserError

LABELS = {"1": 1, "pos": 1, "positive": 1, "0": 0, "neg": 0, "negative": 0}
TEXT_COLUMNS = ("text", "review", "sentence", "content")
LABEL_COLUMNS = ("label", "sentiment")


class LabelledTextsError(UserError):
    """A labelled-texts file that cannot be read as such."""


def read_labelled_texts(path, text_column=None, label_column=None):
    """(texts, labels as an int32 array) from a TSV or CSV file (see the module doc)."""
    path = Path(path)
    content = _read(path)
    rows = _csv_rows(path, content, text_column, label_column) if path.suffix.lower() == ".csv" \
        else _tsv_rows(path, content)
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


def _tsv_rows(path, content):
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        text, tab, label = line.rpartition("\t")
        if not tab:
            raise LabelledTextsError(f"{path}, line {number}: expected text<TAB>label, found "
                                     "no tab (for a CSV file, name it .csv).")
        yield number, text, label


def _csv_rows(path, content, text_column, label_column):
    reader = csv.DictReader(content.splitlines())
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
