"""A text corpus for language modelling: the IMDB reviews, or any UTF-8 texts a user brings.

    python -m data_prep.corpus                              # IMDB: unlabelled + train reviews
    python -m data_prep.corpus --corpus my_texts/           # a .txt file, a folder, a .zip/.tar.gz

A corpus is a list of documents: each file of a folder or archive is one; a single
text file is split into paragraphs (blank lines between them). Files that are binary
or not UTF-8 are skipped and reported. The IMDB default never includes the test
reviews, so a model pretrained on it can be fine-tuned for sentiment without leakage.
Documents are split into train/validation/test (seeded); a WordPiece vocabulary is
learned on train only, unless one is given (fine-tuning keeps a model's vocabulary);
each split is saved as one stream of token ids with `[END]` after every document.
"""

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data_prep import cache, imdb
from data_prep.sources import add_location_arguments, extract
from data_prep.text import (
    SPECIAL_TOKENS,
    TEXT_NORMALIZATION,
    learn_wordpiece,
    looks_binary,
    make_wordpiece_tokenizer,
    normalize_text,
)
from process.commands import import_backend, run_main
from process.errors import UserError

ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")
SPLITS = ("train", "val", "test")
END_ID = SPECIAL_TOKENS.index("[END]")


class CorpusError(UserError):
    """A corpus that cannot be used: missing, empty, or with no readable text."""


@dataclass(frozen=True)
class CorpusSettings:
    vocabulary_size: int = 5000  # WordPiece entries learned on train (an upper bound)
    val_fraction: float = 0.05
    test_fraction: float = 0.05
    seed: int = 1337


# ## Reading documents


def read_documents(path, root=None):
    """(documents, skipped) of a text file, a folder (recursively) or an archive of them.

    `skipped` lists `(file, reason)` for binary, non-UTF-8 and empty files. Archives are
    extracted safely and atomically into the work folder; nothing is modified.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise CorpusError(f"--corpus {path} does not exist; give a UTF-8 .txt file, a "
                          "folder of them, or a .zip/.tar.gz of them.")
    if path.is_file() and path.name.lower().endswith(ARCHIVES):
        key = cache.sha256_of(path)[:16]
        path = extract(path, cache.work_dir(root) / "extracted" / f"corpus-{key}")
    if path.is_file():
        text, reason = _read_text(path)
        if reason:
            raise CorpusError(f"--corpus {path} is {reason}; give UTF-8 text.")
        return [p for p in (" ".join(normalize_text(p).split()) for p in text.split("\n\n"))
                if p], []
    documents, skipped = [], []
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in file.relative_to(path).parts):
            continue  # hidden files and folders (.DS_Store, .git)
        text, reason = _read_text(file)
        text = " ".join(normalize_text(text).split())
        if reason or not text:
            skipped.append((str(file.relative_to(path)), reason or "empty"))
        else:
            documents.append(text)
    return documents, skipped


def _read_text(file):
    """(text, None), or ("", why it is not text)."""
    data = file.read_bytes()
    if looks_binary(data[:8192]):
        return "", "binary (it has NUL bytes)"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as error:
        return "", f"not UTF-8 (byte {error.start + 1})"


def imdb_documents(imdb_path=None, root=None):
    """The 50,000 unlabelled reviews and the 25,000 labelled train reviews (never test)."""
    prepared = imdb.prepare(imdb_path, imdb.ImdbSettings(include_unlabelled=True), root,
                            verbose=False)
    return prepared.unlabelled_texts() + prepared.texts("train") + prepared.texts("val")


def split_documents(documents, settings):
    """{split: documents}, seeded; every split gets at least one document."""
    if len(documents) < 3:
        raise CorpusError(f"The corpus has {len(documents)} document(s); at least 3 are "
                          "needed (train, validation and test).")
    order = np.random.default_rng(settings.seed).permutation(len(documents))
    held_out = [max(1, round(len(documents) * f))
                for f in (settings.val_fraction, settings.test_fraction)]
    val, test = order[:held_out[0]], order[held_out[0]:sum(held_out)]
    train = order[sum(held_out):]
    return {name: [documents[i] for i in sorted(indices)]
            for name, indices in (("train", train), ("val", val), ("test", test))}


# ## Preparing: splits, vocabulary, token ids


@dataclass
class PreparedCorpus:
    directory: Path
    summary: dict

    def documents(self, split):
        return json.loads((self.directory / f"{split}.json").read_text(encoding="utf-8"))

    def vocabulary(self):
        return (self.directory / "vocabulary.txt").read_text(encoding="utf-8").split("\n")

    def token_ids(self, split):
        """The split as one int32 stream: each document's tokens, then `[END]`."""
        return np.load(self.directory / "token_ids.npz")[split]


def prepare(corpus=None, imdb_path=None, settings=CorpusSettings(), root=None,
            vocabulary=None, verbose=True, tokens=None):
    """Prepares (or reuses) a corpus: `corpus` (a path), else the IMDB reviews.

    The streams are of a WordPiece `vocabulary` (learned on train if None), or of a
    pretrained model's tokenizer, `tokens` (`.key`: its digest, `.end_id`, `.size` and
    `.document_ids(documents)`: one id list per document)."""
    started = time.perf_counter()
    source = _source_digest(corpus, imdb_path, root)
    key_settings = {"dataset": "corpus", "source": source, **asdict(settings),
                    "text": TEXT_NORMALIZATION,
                    "vocabulary": vocabulary and hashlib.sha256(
                        "\n".join(vocabulary).encode()).hexdigest(),
                    **({"tokenizer": tokens.key} if tokens else {})}
    directory = cache.prepared_dir("corpus", key_settings, root)
    if not cache.is_intact(directory):
        cache.write_atomically(directory, key_settings, lambda tmp: _write_prepared(
            tmp, corpus, imdb_path, settings, root, vocabulary, verbose, tokens))
    prepared = PreparedCorpus(directory, json.loads((directory / "summary.json").read_text()))
    if verbose:
        cache.print_summary(prepared, started)
    return prepared


def _source_digest(corpus, imdb_path, root):
    if corpus is None:
        folder = imdb.prepare(imdb_path, imdb.ImdbSettings(include_unlabelled=True), root,
                              verbose=False).directory
        return f"imdb:{folder.name}"
    path = Path(corpus).expanduser()
    if not path.exists():
        raise CorpusError(f"--corpus {path} does not exist; give a UTF-8 .txt file, a "
                          "folder of them, or a .zip/.tar.gz of them.")
    return cache.source_digest(path, root)


def _write_prepared(tmp, corpus, imdb_path, settings, root, vocabulary, verbose, tokens):
    if corpus is None:
        documents, skipped = imdb_documents(imdb_path, root), []
    else:
        documents, skipped = read_documents(corpus, root)
    for name, reason in skipped[:10]:
        print(f"{name}: skipped ({reason})")
    if not documents:
        raise CorpusError(f"--corpus {corpus} has no readable UTF-8 text "
                          f"({len(skipped)} file(s) skipped).")
    splits = split_documents(documents, settings)
    if tokens is not None:
        _write_streams(tmp, splits, lambda split, progress: tokens_stream(split, tokens, progress))
        return _write_summary(tmp, corpus, splits, tokens.size, skipped)
    if vocabulary is None:
        if verbose:
            print(f"Learning a WordPiece vocabulary ({settings.vocabulary_size} entries) on "
                  f"{len(splits['train']):,} train documents")
        vocabulary = learn_wordpiece(splits["train"], settings.vocabulary_size)
    (tmp / "vocabulary.txt").write_text("\n".join(vocabulary), encoding="utf-8")
    _write_streams(tmp, splits, lambda split, progress: token_stream(split, vocabulary,
                                                                     progress))
    _write_summary(tmp, corpus, splits, len(vocabulary), skipped)


def _write_streams(tmp, splits, stream):
    """Each split's documents (`<split>.json`) and token ids (`token_ids.npz`)."""
    streams = {}
    with tqdm(total=sum(map(len, splits.values())), desc="Tokenizing documents",
              disable=None) as progress:
        for name, split in splits.items():
            (tmp / f"{name}.json").write_text(json.dumps(split, ensure_ascii=False), "utf-8")
            streams[name] = stream(split, progress)
    np.savez(tmp / "token_ids.npz", **streams)


def _write_summary(tmp, corpus, splits, vocabulary_size, skipped):
    streams = np.load(tmp / "token_ids.npz")
    summary = {"source": str(corpus or "imdb (unlabelled + train reviews)"),
               "documents": {name: len(split) for name, split in splits.items()},
               "tokens": {name: int(len(streams[name])) for name in splits},
               "words": {name: sum(len(d.split()) for d in split) for name, split in
                         splits.items()},
               "vocabulary_size": vocabulary_size, "skipped_files": len(skipped),
               "skipped": [f"{name}: {reason}" for name, reason in skipped[:100]]}
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2))


def token_stream(documents, vocabulary, progress=None):
    """One int32 array: each document's WordPiece ids, then `[END]`."""
    tokenizer = make_wordpiece_tokenizer(vocabulary)
    return _stream(documents, tokenizer, END_ID, progress)


def tokens_stream(documents, tokens, progress=None):
    """One int32 array: each document's ids by a pretrained tokenizer, then its end id."""
    return _stream(documents, tokens.document_ids, tokens.end_id, progress)


def _stream(documents, ids_of, end_id, progress, batch_size=512):
    pieces = []
    for start in range(0, len(documents), batch_size):
        batch = documents[start:start + batch_size]
        for row in ids_of(batch):
            pieces += [np.asarray(row, "int32"), np.asarray([end_id], "int32")]
        if progress:
            progress.update(len(batch))
    return np.concatenate(pieces) if pieces else np.zeros((0,), "int32")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m data_prep.corpus",
                                     description="Prepare a text corpus and print a summary.")
    parser.add_argument("--corpus", help="a UTF-8 .txt file, a folder of them, or a "
                        ".zip/.tar.gz of them (default: the IMDB reviews)")
    add_location_arguments(parser, imdb.ACL_IMDB)
    parser.add_argument("--vocabulary-size", type=int, default=CorpusSettings.vocabulary_size)
    args = parser.parse_args(argv)
    import_backend()
    if args.vocabulary_size < len(SPECIAL_TOKENS) + 1:
        raise CorpusError(f"--vocabulary-size must be more than {len(SPECIAL_TOKENS)}.")
    prepare(args.corpus, args.imdb_path, CorpusSettings(vocabulary_size=args.vocabulary_size),
            args.work_dir)


if __name__ == "__main__":
    run_main(main)
