"""IMDB movie reviews (Maas et al., 2011): splits, vectorization and tf.data pipelines.

The official train set is split 80/20 into train/validation by a seeded, label-
stratified shuffle of the file list (the tutorial moved files out of the dataset
folder; nothing here writes to it); the official test set is kept whole. Prepared
data (cleaned texts, vocabulary, token-id arrays) is cached in the work folder,
keyed by the settings, so a second `prepare` with the same settings does no work.

    python -m data_prep.imdb --imdb-path ../shared/data/aclImdb_v1.tar.gz
"""

import argparse
import json
import re
import string
import time
import unicodedata
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_prep import cache
from data_prep.pipelines import untuned
from data_prep.sources import (
    DatasetSource,
    DataSourceError,
    add_location_arguments,
    prepared_entry,
    resolve,
)
from data_prep.text import (
    CONTROLS,
    TEXT_NORMALIZATION,
    clean_html,
    normalize_text,
    register_standardizations,
    sentence_slices,
    standardize_any_language,
    standardize_review,
)
from process.commands import import_backend, run_main

ACL_IMDB = DatasetSource(
    name="aclImdb",
    archive_name="aclImdb_v1.tar.gz",
    url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
    sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
    marker="aclImdb/train/pos",
    env_var="NLPKIT_IMDB_PATH",
    flag="--imdb-path",
)
SPLITS = ("train", "val", "test")
CLASSES = ("negative", "positive")  # label 0 and 1
STANDARDIZE = {"review": standardize_review, "any_language": standardize_any_language}


@dataclass(frozen=True)
class ImdbSettings:
    """Everything that changes the prepared data (and so its cache key)."""

    max_tokens: int = 20000
    sequence_length: int = 600
    val_fraction: float = 0.2
    seed: int = 1337
    include_unlabelled: bool = False
    standardize = "review"  # (not a field: the prepared reviews' key stays as it was)


def read_review(path):
    """A review file's text, normalized as every reader of the kit normalizes a text
    (`data_prep.text.normalize_text`), then its HTML tags and entities cleaned."""
    return clean_html(normalize_text(path.read_text(encoding="utf-8")))


def read_reviews(folder):
    """Reads `folder/pos/*.txt` and `folder/neg/*.txt` -> (texts, labels, skipped).

    Files are sorted by name so the order is the same on every machine. Files that
    are not UTF-8 are skipped and counted, with one warning for the folder.
    """
    texts, labels, skipped = [], [], 0
    for label, name in ((0, "neg"), (1, "pos")):
        for path in sorted((Path(folder) / name).glob("*.txt")):
            try:
                texts.append(read_review(path))
            except UnicodeDecodeError:
                skipped += 1
                continue
            labels.append(label)
    if skipped:
        warnings.warn(f"Skipped {skipped} review files in {folder} that are not UTF-8.",
                      stacklevel=2)
    return texts, np.array(labels, dtype="int32"), skipped


def read_unlabelled(folder):
    texts = []
    for path in sorted((Path(folder) / "unsup").glob("*.txt")):
        try:
            texts.append(read_review(path))
        except UnicodeDecodeError:
            continue
    return texts


def split_train_val(labels, val_fraction, seed):
    """Seeded, label-stratified split of indices -> (train_indices, val_indices)."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for label in np.unique(labels):
        indices = rng.permutation(np.flatnonzero(labels == label))
        cut = int(round(len(indices) * val_fraction))
        val.extend(indices[:cut])
        train.extend(indices[cut:])
    return rng.permutation(train), rng.permutation(val)


def make_vectorizer(settings, vocabulary=None):
    """The `TextVectorization` layer of the tutorial, with HTML-aware standardization
    (`settings.standardize`: the reviews', or one for any language)."""
    import keras

    register_standardizations()

    return keras.layers.TextVectorization(
        max_tokens=settings.max_tokens,
        output_mode="int",
        output_sequence_length=settings.sequence_length,
        standardize=STANDARDIZE[settings.standardize],
        vocabulary=vocabulary,
    )


class ReviewVectorizer:
    """The prepared `TextVectorization`, in plain Python: the same token ids for any
    text, without TensorFlow (a model trained on the prepared ids serves anywhere).

    It repeats `standardize_review` and TensorFlow's defaults: ASCII
    letters lowercased (TensorFlow leaves other letters as they are), HTML tags and
    entities turned into spaces, ASCII punctuation dropped, split on ASCII whitespace;
    unknown words are `[UNK]` (1), rows cut or 0-padded to `sequence_length`. With
    `standardize="any_language"` it repeats `standardize_any_language`: every letter
    lowercased, every Unicode punctuation mark dropped.
    """

    _LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
    _MARKUP = re.compile(r"<[^>]+>|&[a-z]+;|&#[0-9]+;")
    _PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")
    _WHITESPACE = re.compile(r"[ \t\n\r\x0b\x0c]+")

    def __init__(self, vocabulary, sequence_length, standardize="review"):
        self.vocabulary, self.sequence_length = list(vocabulary), sequence_length
        self.standardize = standardize
        self.index = {token: i for i, token in enumerate(self.vocabulary) if i > 0}

    def __call__(self, texts):
        ids = np.zeros((len(texts), self.sequence_length), "int32")
        for row, text in enumerate(texts):
            tokens = self.tokens(text)[:self.sequence_length]
            ids[row, :len(tokens)] = [self.index.get(token, 1) for token in tokens]
        return ids

    def tokens(self, text):
        text = CONTROLS.sub(" ", text).replace("\ufeff", " ")  # as `without_controls`
        if self.standardize == "any_language":
            text = "".join(character for character in self._MARKUP.sub(" ", text.lower())
                           if not unicodedata.category(character).startswith("P"))
        else:
            text = self._PUNCTUATION.sub("", self._MARKUP.sub(" ", text.translate(self._LOWER)))
        return [token for token in self._WHITESPACE.split(text) if token]


@dataclass
class PreparedImdb:
    """Prepared IMDB data on disk, loaded lazily where large."""

    directory: Path
    settings: ImdbSettings
    summary: dict

    @property
    def classes(self):
        """The label of each class index (IMDB's: negative, positive)."""
        return list(self.summary.get("classes", CLASSES))

    def texts(self, split):
        return json.loads((self.directory / f"{split}_texts.json").read_text())

    def labels(self, split):
        return np.load(self.directory / f"{split}_labels.npy")

    def token_ids(self, split):
        """Token ids `(n, sequence_length)`, int32, 0-padded: ready for any backend."""
        return np.load(self.directory / f"{split}_ids.npy")

    def vocabulary(self):
        return (self.directory / "vocabulary.txt").read_text(encoding="utf-8").split("\n")

    def vectorizer(self):
        """A `TextVectorization` with the saved vocabulary, identical to the adapted one."""
        return make_vectorizer(self.settings, vocabulary=self.vocabulary())

    def python_vectorizer(self):
        """The same vectorizer in plain Python (`ReviewVectorizer`): no TensorFlow."""
        return ReviewVectorizer(self.vocabulary(), self.settings.sequence_length,
                                self.settings.standardize)

    def unlabelled_texts(self):
        path = self.directory / "unsup_texts.json"
        return json.loads(path.read_text()) if path.exists() else []


def prepare(path=None, settings=ImdbSettings(), root=None, verbose=True):
    """Prepares (or reuses) the IMDB data for `settings`; returns `PreparedImdb`."""
    directory, key_settings = prepared_entry(
        ACL_IMDB, "imdb", {"dataset": "imdb", **asdict(settings), "text": TEXT_NORMALIZATION},
        path, root)
    if not cache.is_intact(directory):
        folder = resolve(ACL_IMDB, path, root, key_settings.get("source")) / "aclImdb"
        cache.write_atomically(
            directory, key_settings, lambda tmp: _write_prepared(folder, settings, tmp, verbose)
        )
    summary = json.loads((directory / "summary.json").read_text())
    return PreparedImdb(directory, settings, summary)


def _write_prepared(folder, settings, tmp, verbose):
    started = time.perf_counter()
    say = print if verbose else (lambda *args: None)
    say(f"Reading reviews from {folder}")
    train_texts, train_labels, skipped_train = read_reviews(folder / "train")
    test_texts, test_labels, skipped_test = read_reviews(folder / "test")
    check_splits(folder, train_labels, test_labels)
    train_idx, val_idx = split_train_val(train_labels, settings.val_fraction, settings.seed)
    splits = {
        "train": ([train_texts[i] for i in train_idx], train_labels[train_idx]),
        "val": ([train_texts[i] for i in val_idx], train_labels[val_idx]),
        "test": (test_texts, test_labels),
    }
    vocabulary = write_vectorized(splits, settings, tmp, say, "reviews")
    unlabelled = read_unlabelled(folder / "train") if settings.include_unlabelled else []
    if unlabelled:
        (tmp / "unsup_texts.json").write_text(json.dumps(unlabelled))
    lengths = [len(text.split()) for text in splits["train"][0]]
    summary = {
        "counts": {split: len(texts) for split, (texts, _) in splits.items()},
        "positive_fraction": {s: round(float(np.mean(y)), 4) for s, (_, y) in splits.items()},
        "unlabelled": len(unlabelled),
        "skipped_non_utf8": skipped_train + skipped_test,
        "vocabulary_size": len(vocabulary),
        "train_words_per_review": {"median": int(np.median(lengths)),
                                   "p95": int(np.percentile(lengths, 95))},
        "prepare_seconds": round(time.perf_counter() - started, 1),
    }
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2))


MIN_REVIEWS = 2  # per class and split: a train review and a validation review of each


def check_splits(folder, train_labels, test_labels):
    """Refuses, in one line, a tree whose train or test split lacks reviews of a class
    (an empty `pos` or `neg` folder, a missing `test` folder): it would train or score
    on part of the task."""
    for split, labels in (("train", train_labels), ("test", test_labels)):
        for label, name in ((0, "neg"), (1, "pos")):
            count = int(np.sum(labels == label))
            if count < MIN_REVIEWS:
                raise DataSourceError(
                    f"{folder / split / name} holds {count} readable reviews (at least "
                    f"{MIN_REVIEWS} are needed): point {ACL_IMDB.flag} at a whole aclImdb "
                    "tree (train and test, each with pos and neg).")


def write_vectorized(splits, settings, folder, say, what="texts"):
    """Writes each split's texts, labels (class indexes) and token ids in `folder`, with
    the vocabulary adapted on the train split; returns the vocabulary."""
    say(f"Adapting the vocabulary ({settings.max_tokens} tokens) on the train split")
    vectorizer = make_vectorizer(settings)
    vectorizer.adapt(splits["train"][0], batch_size=512)
    vocabulary = vectorizer.get_vocabulary()
    (folder / "vocabulary.txt").write_text("\n".join(vocabulary), encoding="utf-8")
    for split, (texts, labels) in splits.items():
        say(f"Vectorizing {split} ({len(texts)} {what})")
        (folder / f"{split}_texts.json").write_text(json.dumps(texts))
        np.save(folder / f"{split}_labels.npy", np.asarray(labels, "int32"))
        np.save(folder / f"{split}_ids.npy", vectorize(vectorizer, texts))
    return vocabulary


def vectorize(vectorizer, texts, batch_size=1024):
    """Token ids for `texts` as one int32 array."""
    chunks = [np.asarray(vectorizer(texts[i : i + batch_size]))
              for i in range(0, len(texts), batch_size)]
    return np.concatenate(chunks).astype("int32")


def split_texts(prepared, split, slices=0, seed=0, place="anywhere"):
    """(texts, labels) of `split`; for train, plus `slices` slices of one or two sentences
    of each review (`text.sentence_slices`, from `place`), labelled as the review: short
    text seen in training."""
    texts, labels = prepared.texts(split), prepared.labels(split)
    if slices and split == "train":
        texts = texts + sentence_slices(texts, slices, seed, place)
        labels = np.concatenate([labels, np.repeat(labels, slices)])
    return texts, labels


def text_dataset(texts, labels, batch_size=32, shuffle=False, seed=0):
    """A tf.data pipeline of (raw text, label) batches."""
    import tensorflow as tf  # tf.data only: prepared arrays load where TF is absent (JAX)

    dataset = untuned(tf.data.Dataset.from_tensor_slices((list(texts), labels)))
    if shuffle:
        dataset = dataset.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size).prefetch(2)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.imdb", description="Prepare the IMDB reviews and print a summary."
    )
    add_location_arguments(parser, ACL_IMDB)
    defaults = ImdbSettings()
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    parser.add_argument("--sequence-length", type=int, default=defaults.sequence_length)
    parser.add_argument("--val-fraction", type=float, default=defaults.val_fraction)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--include-unlabelled", action="store_true",
                        help="also keep the 50,000 unlabelled reviews (for Word2Vec)")
    args = parser.parse_args(argv)
    import_backend()
    settings = ImdbSettings(args.max_tokens, args.sequence_length, args.val_fraction,
                            args.seed, args.include_unlabelled)
    started = time.perf_counter()
    prepared = prepare(args.imdb_path, settings, args.work_dir)
    cache.print_summary(prepared, started)


if __name__ == "__main__":
    run_main(main)
