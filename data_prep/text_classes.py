"""A user's labelled texts, prepared as the IMDB reviews are: any number of classes, any
language.

A file of texts and labels (`labelled_texts.read_classes`: TSV, CSV or JSON lines) is
split 72/18/10 into train, validation and test (10% for test, then `val_fraction`, 0.2,
of the rest, as IMDB holds out a share of its train reviews) by a seeded shuffle
stratified by class,
with every copy of a text in one split (a duplicate never lets a model see a test text
in training); a validation or test file, when given, is used as that split instead.
The classes are the labels' strings, sorted (numerically when every label is a
number), and index the prepared labels; the vocabulary is adapted on train with a
standardization that keeps accents and every script (`text.standardize_any_language`).
The prepared folder is the same as IMDB's (`imdb.PreparedImdb` reads it), keyed by the
settings and by the content of each file, so an edited file is prepared again.

    python -m data_prep.text_classes --texts news.csv --label-column sentiment
"""

import argparse
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_prep import cache
from data_prep.imdb import PreparedImdb, write_vectorized
from data_prep.labelled_texts import LabelledTextsError, read_classes
from data_prep.text import TEXT_NORMALIZATION
from process.commands import import_backend, run_main

MIN_PER_CLASS = 2  # examples of each class: one to train on, one to validate on


@dataclass(frozen=True)
class TextsSettings:
    """Everything that changes the prepared texts (and so their cache key)."""

    max_tokens: int = 20000
    sequence_length: int = 600
    val_fraction: float = 0.2  # of the texts left after the test split (IMDB's meaning)
    test_fraction: float = 0.1
    seed: int = 1337
    standardize: str = "any_language"  # `ReviewVectorizer`'s and the layer's


@dataclass(frozen=True)
class TextsFiles:
    """The user's files: `texts` (split unless `validation`/`test` are given) and the
    columns to read from each (None: found by name, see `labelled_texts`)."""

    texts: str
    validation: str | None = None
    test: str | None = None
    text_column: str | None = None
    label_column: str | None = None

    def given(self):
        """`{split: path}` of the files given."""
        return {split: path for split, path in (("texts", self.texts), ("val", self.validation),
                                                ("test", self.test)) if path}


def prepare(files, settings=TextsSettings(), root=None, verbose=True):
    """Prepares (or reuses) `files` (a `TextsFiles`) with `settings`; returns a
    `PreparedImdb` whose `classes` name its labels."""
    given = files.given()
    for path in given.values():
        if not Path(path).is_file():
            raise LabelledTextsError(f"{path} is not a file; give a .tsv, .csv or .jsonl "
                                     "file of texts and labels.")
    keyed = {"dataset": "texts", **asdict(settings), "text": TEXT_NORMALIZATION,
             "columns": [files.text_column,
             files.label_column], "files": {split: cache.source_digest(path, root)
                                            for split, path in given.items()}}
    directory = cache.prepared_dir("texts", keyed, root)
    if not cache.is_intact(directory):
        splits = read_splits(files, settings)  # a bad file is refused before any write
        cache.write_atomically(directory, keyed,
                               lambda tmp: _write_prepared(splits, settings, tmp, verbose))
    summary = json.loads((directory / "summary.json").read_text())
    return PreparedImdb(directory, settings, summary)


def read_splits(files, settings):
    """`{split: (texts, label strings)}` of train, val and test, and the classes."""
    read = {split: read_classes(path, files.text_column, files.label_column)
            for split, path in files.given().items()}
    texts, labels = read.pop("texts")
    classes = class_names(labels)
    check_counts(files.texts, labels, classes)
    fractions = held_out_shares(settings, given=read)
    indices = grouped_split(texts, labels, fractions, settings.seed)
    splits = {split: ([texts[i] for i in rows], [labels[i] for i in rows])
              for split, rows in indices.items() if len(rows)}
    if "val" not in splits and "val" not in read:
        raise LabelledTextsError(
            f"{files.texts} holds too few different texts to hold any out for validation "
            f"({len(set(texts))} different in {len(texts)} rows; every copy of a text stays "
            "in one split): add texts, or give the validation texts with "
            "--validation-texts.")
    for split, (split_texts, split_labels) in read.items():
        unknown = sorted(set(split_labels) - set(classes))
        if unknown:
            raise LabelledTextsError(
                f"{getattr(files, 'validation' if split == 'val' else split)} has labels "
                f"the training texts lack ({', '.join(unknown[:5])}): a model can only "
                f"learn the classes {files.texts} holds ({', '.join(classes[:10])}).")
        splits[split] = (split_texts, split_labels)
    return splits, classes


def held_out_shares(settings, given=()):
    """`{"val", "test": share of the file's texts}`: none for a split whose file is
    `given`; the validation share is of the texts the test split leaves (72/18/10 by
    default, 80/20 beside a test file), as IMDB's is of its train reviews."""
    test = 0.0 if "test" in given else settings.test_fraction
    return {"val": 0.0 if "val" in given else settings.val_fraction * (1 - test),
            "test": test}


def class_names(labels):
    """The distinct labels, sorted numerically when every one is a number, else as text."""
    distinct = set(labels)
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return sorted(distinct)


def check_counts(path, labels, classes):
    """Refuses one class only, or a class with fewer than `MIN_PER_CLASS` texts."""
    if len(classes) < 2:
        raise LabelledTextsError(f"{path}: every text has the label {classes[0]!r}; a "
                                 "classifier needs texts of two classes or more.")
    counts = Counter(labels)
    rare = [label for label in classes if counts[label] < MIN_PER_CLASS]
    if rare:
        header = counts[rare[0]] == 1 and list(labels)[:1] == [rare[0]]
        raise LabelledTextsError(
            f"{path}: class {rare[0]!r} has {counts[rare[0]]} text(s) (at least "
            f"{MIN_PER_CLASS} of each class are needed, one to train on and one to "
            "validate on); add texts of it or leave it out" + (
                ". It is the first line's: if that line names the columns, say which "
                "they are with --text-column and --label-column." if header else "."))


def grouped_split(texts, labels, fractions, seed):
    """`{"train", "val", "test": row indices}`: per class (of a text's first copy), a
    seeded shuffle of the distinct texts, cut so that each split holds about its
    fraction of the class's rows (validation at least one, test at least one from
    three rows up, train the rest and at least one); every copy of a text lands in the
    split of its first copy."""
    rng = np.random.default_rng(seed)
    copies = {}
    for row, text in enumerate(texts):
        copies.setdefault(text, []).append(row)
    by_class = {}
    for rows in copies.values():
        by_class.setdefault(labels[rows[0]], []).append(rows)
    split = {"train": [], "val": [], "test": []}
    for label in sorted(by_class):
        groups = [by_class[label][i] for i in rng.permutation(len(by_class[label]))]
        total = sum(len(rows) for rows in groups)
        wanted = {"test": _share(total, fractions["test"], 3),
                  "val": _share(total, fractions["val"], 2)}
        split["train"].extend(groups[0])  # a class is always trained on
        for rows in groups[1:]:
            taken = next((name for name in ("test", "val") if wanted[name] > 0), "train")
            wanted[taken] = wanted.get(taken, 0) - len(rows)
            split[taken].extend(rows)
    return {name: rng.permutation(np.array(rows, "int64")) for name, rows in split.items()}


def _share(total, fraction, least_from):
    """Rows a split takes of a class of `total` rows: its fraction, at least one where
    the class has `least_from` rows or more; none for a fraction of 0."""
    if not fraction:
        return 0
    return max(int(round(total * fraction)), 1 if total >= least_from else 0)


def _write_prepared(read, settings, tmp, verbose):
    started = time.perf_counter()
    say = print if verbose else (lambda *args: None)
    splits, classes = read
    index = {label: i for i, label in enumerate(classes)}
    vocabulary = write_vectorized({split: (texts, [index[label] for label in labels])
                                   for split, (texts, labels) in splits.items()},
                                  settings, tmp, say)
    lengths = [len(text.split()) for text in splits["train"][0]]
    summary = {
        "classes": classes,
        "counts": {split: len(texts) for split, (texts, _) in splits.items()},
        "class_counts": {split: {label: Counter(labels)[label] for label in classes}
                         for split, (_, labels) in splits.items()},
        "unlabelled": 0,
        "vocabulary_size": len(vocabulary),
        "train_words_per_text": {"median": int(np.median(lengths)),
                                 "p95": int(np.percentile(lengths, 95))},
        "prepare_seconds": round(time.perf_counter() - started, 1),
    }
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))


def add_texts_arguments(parser):
    """The flags of a user's labelled texts (`TextsFiles`)."""
    parser.add_argument("--texts", metavar="FILE", help="your labelled texts to train on "
                        "(.tsv text<TAB>label, .csv or .jsonl with text and label columns; "
                        "any labels, 2 or more classes): split 72/18/10 unless the files "
                        "below are given (default: the IMDB reviews)")
    parser.add_argument("--validation-texts", metavar="FILE",
                        help="--texts: the validation split, in the same format")
    parser.add_argument("--test-texts", metavar="FILE",
                        help="--texts: the test split, in the same format")
    parser.add_argument("--text-column", help="the column (or JSON key) of the texts "
                        "(default: text, review, sentence or content)")
    parser.add_argument("--label-column", help="the column (or JSON key) of the labels "
                        "(default: label, sentiment, class or category)")


def files_of(args):
    """The `TextsFiles` the flags name, or None without `--texts`."""
    if not getattr(args, "texts", None):
        for flag in ("validation_texts", "test_texts"):
            if getattr(args, flag, None):
                raise LabelledTextsError(f"--{flag.replace('_', '-')} goes with --texts "
                                         "(the texts to train on).")
        return None
    return TextsFiles(args.texts, args.validation_texts, args.test_texts, args.text_column,
                      args.label_column)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m data_prep.text_classes",
                                     description="Prepare your labelled texts and print a "
                                                 "summary.")
    add_texts_arguments(parser)
    parser.add_argument("--work-dir", help="the work folder (default: ./work or "
                                           "$NLPKIT_WORK_DIR)")
    defaults = TextsSettings()
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    parser.add_argument("--sequence-length", type=int, default=defaults.sequence_length)
    args = parser.parse_args(argv)
    files = files_of(args)
    if files is None:
        parser.error("--texts is required")
    import_backend()
    started = time.perf_counter()
    prepared = prepare(files, TextsSettings(args.max_tokens, args.sequence_length),
                       args.work_dir)
    cache.print_summary(prepared, started)


if __name__ == "__main__":
    run_main(main)
