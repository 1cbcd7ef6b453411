"""In-domain word vectors: gensim Word2Vec (or FastText) trained on IMDB reviews.

    python -m data_prep.word2vec --imdb-path ../shared/data/aclImdb_v1.tar.gz
"""

import argparse
import re
import string
import time
from pathlib import Path

from tqdm import tqdm

from data_prep import imdb
from data_prep.cache import produce_file
from data_prep.text import clean_html
from process.commands import import_backend, run_main

PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")
PROBE_WORDS = ("movie", "great", "awful", "actor", "funny")


def tokenize(text):
    """The tokens `standardize_review` + whitespace splitting make, so they match the vocabulary."""
    return PUNCTUATION.sub("", clean_html(text).lower()).split()


def train_word2vec(texts, vector_size=100, window=5, min_count=5, epochs=5, seed=1337,
                   workers=2, algorithm="word2vec", tokenize=tokenize):
    """Trains skip-gram vectors on `texts` (split into words by `tokenize`); returns
    gensim `KeyedVectors`.

    `algorithm="fasttext"` also learns character n-grams (Bojanowski et al., 2017).
    Shows progress epoch by epoch. `workers=1` makes the vectors reproducible.
    """
    from gensim.models import FastText, Word2Vec

    from data_prep.gensim_progress import EpochProgress

    models = {"word2vec": Word2Vec, "fasttext": FastText}
    if algorithm not in models:
        raise ValueError(f"`algorithm` must be one of {sorted(models)}, got {algorithm!r}.")
    sentences = [tokenize(text) for text in texts]
    with tqdm(total=epochs, desc=f"{algorithm} epochs", disable=None) as progress:
        model = models[algorithm](sentences, vector_size=vector_size, window=window,
                                  min_count=min_count, sg=1, epochs=epochs, seed=seed,
                                  workers=workers, callbacks=[EpochProgress(progress)])
    return model.wv


def neighbours_report(keyed_vectors, words=PROBE_WORDS, topn=5):
    """Nearest neighbours of probe words and one analogy, as printable lines."""
    lines = []
    for word in words:
        if word in keyed_vectors:
            near = ", ".join(w for w, _ in keyed_vectors.most_similar(word, topn=topn))
            lines.append(f"{word}: {near}")
    if all(w in keyed_vectors for w in ("actor", "man", "woman")):
        answer = keyed_vectors.most_similar(positive=["actor", "woman"], negative=["man"], topn=3)
        lines.append("actor - man + woman: " + ", ".join(w for w, _ in answer))
    return lines


def default_vectors_path(prepared_imdb, algorithm="word2vec", vector_size=100):
    """Where the CLI saves (and the IMDB workflow looks for) trained vectors."""
    return Path(prepared_imdb.directory) / f"{algorithm}-{vector_size}d.kv"


def load_or_train(prepared_imdb, path=None, algorithm="word2vec", vector_size=100, epochs=5):
    """The vectors saved at `path`, or trained on the unlabelled + train reviews and saved."""
    from gensim.models import KeyedVectors

    path = Path(path or default_vectors_path(prepared_imdb, algorithm, vector_size))

    def train(partial):
        texts = prepared_imdb.unlabelled_texts() + prepared_imdb.texts("train")
        print(f"Training {algorithm} on {len(texts)} reviews (once; saved to {path})",
              flush=True)
        started = time.perf_counter()
        split = tokenize  # the reviews' own; a user's texts: as their vocabulary splits them
        if getattr(prepared_imdb.settings, "standardize", "review") != "review":
            split = prepared_imdb.python_vectorizer().tokens
        vectors = train_word2vec(texts, vector_size, epochs=epochs, algorithm=algorithm,
                                 tokenize=split)
        print(f"Trained {algorithm} in {time.perf_counter() - started:.1f} s")
        vectors.save(str(partial), separately=[])  # one file, so the rename is atomic

    if path.exists():
        print(f"Reusing {path}")
    return KeyedVectors.load(str(produce_file(path, train)))  # a second process waits


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.word2vec",
        description="Train Word2Vec on the IMDB unlabelled + train reviews and save it.",
    )
    imdb.add_location_arguments(parser, imdb.ACL_IMDB)
    parser.add_argument("--vector-size", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--algorithm", choices=("word2vec", "fasttext"), default="word2vec")
    parser.add_argument("--output", help="where to save the .kv file "
                        "(default: <prepared IMDB folder>/<algorithm>-<size>d.kv)")
    args = parser.parse_args(argv)
    import_backend()
    prepared = imdb.prepare(args.imdb_path, imdb.ImdbSettings(include_unlabelled=True),
                            args.work_dir)
    output = Path(args.output or default_vectors_path(prepared, args.algorithm, args.vector_size))
    vectors = load_or_train(prepared, output, args.algorithm, args.vector_size, args.epochs)
    print(f"{len(vectors.index_to_key)} words x {vectors.vector_size} -> {output}")
    print("\n".join(neighbours_report(vectors)))


if __name__ == "__main__":
    run_main(main)
