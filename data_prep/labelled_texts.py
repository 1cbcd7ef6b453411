"""Labelled texts from a user's file: to train a classifier on, or to score one on.

Three formats:
- one `text<TAB>label` per line (the last tab separates the label), after an optional
  header line that names the columns (`sentence<TAB>label`, `label<TAB>text`, ...);
- a `.csv` file with a header naming a text column (`text`, `review`, `sentence`
  or `content`) and a label column (`label`, `sentiment`, `class` or `category`), or
  the columns given;
- a `.jsonl` file (JSON lines): one object a line, with those keys.

`read_classes` reads labels as any strings (the classes of a dataset);
`read_labelled_texts` reads a binary sentiment file: `1`/`0`, `pos`/`neg` or
`positive`/`negative` (any case). A bad line is reported with its number, never
skipped in silence. Every text and label is normalized as it is read
(`data_prep.text.normalize_text`: controls and line separators become spaces,
Windows-1252 quotes are repaired, NFC), so any Unicode a file holds trains, saves and
reloads.
"""

import csv
import io
import json
from pathlib import Path

import numpy as np

from data_prep.text import looks_binary, normalize_text, text_lines
from process.errors import UserError

LABELS = {"1": 1, "pos": 1, "positive": 1, "0": 0, "neg": 0, "negative": 0}
TEXT_COLUMNS = ("text", "review", "sentence", "content")
LABEL_COLUMNS = ("label", "sentiment", "class", "category")
JSON_LINES = (".jsonl", ".ndjson", ".json")


class LabelledTextsError(UserError):
    """A labelled-texts file that cannot be read as such."""


def read_classes(path, text_column=None, label_column=None):
    """(texts, labels as stripped strings) from a TSV, CSV or JSON-lines file (see the
    module doc); refuses an empty text or label, and a label column that holds texts."""
    path = Path(path)
    texts, labels = [], []
    for line, text, label in _rows(path, text_column, label_column):
        if not text.strip():
            raise LabelledTextsError(f"{path}, line {line}: the text is empty.")
        if not label.strip():
            raise LabelledTextsError(f"{path}, line {line}: the label is empty.")
        texts.append(text)
        labels.append(label.strip())
    if not texts:
        raise LabelledTextsError(f"{path} has no labelled texts.")
    _check_labels_are_classes(path, labels)
    return texts, labels


MAX_CLASS_SHARE = 0.5  # more distinct labels than this share of rows (and 50): texts


def _check_labels_are_classes(path, labels):
    distinct = set(labels)
    if len(distinct) > max(50, MAX_CLASS_SHARE * len(labels)):
        raise LabelledTextsError(
            f"{path}: its label column holds {len(distinct)} different values in "
            f"{len(labels)} rows, more like texts than classes; name the columns with "
            "--text-column and --label-column.")


def read_labelled_texts(path, text_column=None, label_column=None):
    """(texts, labels as an int32 array: 1 positive) from a binary sentiment file."""
    path = Path(path)
    texts, labels = [], []
    for line, text, label in _rows(path, text_column, label_column):
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


def _rows(path, text_column, label_column):
    """`(line number, text, label)` of each row of `path`, in the format its name says."""
    content = _read(path)
    suffix = path.suffix.lower()
    rows = _csv_rows if suffix == ".csv" else _json_rows if suffix in JSON_LINES \
        else _tsv_rows
    for line, text, label in rows(path, content, text_column, label_column):
        yield line, normalize_text(text), normalize_text(label)


def _read(path):
    try:
        head = path.read_bytes()[:8192] if path.is_file() else b""
        if looks_binary(head):
            raise LabelledTextsError(f"{path} is a binary file, not text: give a .tsv, .csv "
                                     "or .jsonl file of texts and labels, saved as UTF-8.")
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


def _json_rows(path, content, text_column, label_column):
    header = None
    for number, line in enumerate(text_lines(content), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise LabelledTextsError(f"{path}, line {number}: not JSON ({error.msg}); a "
                                     ".jsonl file holds one object a line.") from None
        if not isinstance(row, dict):
            raise LabelledTextsError(f"{path}, line {number}: a JSON object is expected, "
                                     f"found a {type(row).__name__}.")
        if header is None:
            header = list(row)
            text = _column(path, header, text_column, TEXT_COLUMNS, "text")
            label = _column(path, header, label_column, LABEL_COLUMNS, "label")
        if text not in row or label not in row:
            raise LabelledTextsError(f"{path}, line {number}: no {text!r} or no {label!r} "
                                     "key.")
        if not all(isinstance(row[key], str | int) and not isinstance(row[key], bool)
                   for key in (text, label)):
            raise LabelledTextsError(f"{path}, line {number}: {text!r} and {label!r} must be "
                                     "strings (or whole numbers).")
        yield number, str(row[text]), str(row[label])


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
