"""Paragraph vectors: gensim Doc2Vec (PV-DBOW by default) trained on IMDB reviews.

Le & Mikolov (2014); Mesnil et al. (2014) ensemble them with NBSVM. The model learns
one vector per training review; any other text gets its vector by inference (a few
passes of gradient steps on that text alone, the word weights frozen). Inference is
seeded by the text itself, so a review gets the same vector whatever it is batched
with, and a model scores the same in `evaluate`, in an ensemble and when served.
"""

import contextlib
import copy
import json
import re
import threading
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from gensim.models import KeyedVectors, doc2vec_inner
from gensim.models.doc2vec import Doc2Vec, TaggedDocument
from tqdm import tqdm

from data_prep import cache
from data_prep.text import clean_html

TOKEN = re.compile(r"[\w']+|[!?]")  # words, and the punctuation that carries sentiment
MODEL_FILE = "doc2vec.model"
TIMING_FILE = "training.json"  # the seconds Doc2Vec took to train


def tokenize(text):
    """Lowercased words of the text without HTML; `!` and `?` kept as tokens."""
    return TOKEN.findall(clean_html(text).lower())


@dataclass(frozen=True)
class ParagraphVectorSettings:
    vector_size: int = 100
    dm: bool = False  # False: PV-DBOW (distributed bag of words); True: PV-DM
    dbow_words: bool = False  # PV-DBOW: also train skip-gram word vectors (slower)
    window: int = 10
    min_count: int = 2
    negative: int = 5
    sample: float = 0.0  # down-sampling of frequent words
    epochs: int = 20
    seed: int = 1337


class ParagraphVectors:
    """A trained Doc2Vec model that turns any text into a vector."""

    def __init__(self, model):
        self.model = model
        self._seeding = threading.Lock()  # `model.random` is shared: one inference at a time

    @property
    def vector_size(self):
        return self.model.vector_size

    @classmethod
    def train(cls, texts, settings=ParagraphVectorSettings(), workers=2):
        from data_prep.gensim_progress import EpochProgress

        documents = [TaggedDocument(tokenize(text), [i]) for i, text in enumerate(texts)]
        model = Doc2Vec(vector_size=settings.vector_size, dm=int(settings.dm),
                        dbow_words=int(settings.dbow_words), window=settings.window,
                        min_count=settings.min_count, negative=settings.negative, hs=0,
                        sample=settings.sample, epochs=settings.epochs, seed=settings.seed,
                        workers=workers)
        model.build_vocab(documents)
        with tqdm(total=settings.epochs, desc="Doc2Vec epochs", disable=None) as progress:
            model.train(documents, total_examples=len(documents), epochs=settings.epochs,
                        callbacks=[EpochProgress(progress)])
        return cls(model)

    def infer(self, texts, label=None):
        """One float32 vector per text (rows of a `(len(texts), vector_size)` array);
        progress is shown under `label` if given."""
        vectors = np.zeros((len(texts), self.vector_size), "float32")
        with tqdm(total=len(texts), desc=label, disable=None) if label \
                else contextlib.nullcontext() as progress:
            for i, text in enumerate(texts):
                vectors[i] = self._infer_one(text)
                if progress:
                    progress.update()
        return vectors

    def _infer_one(self, text):
        """`Doc2Vec.infer_vector` with every random draw seeded by the text: gensim's own
        seeds the starting vector with Python's `hash`, which differs between processes."""
        model, seed = self.model, zlib.crc32(text.encode("utf-8"))
        start = np.random.default_rng(seed).random(model.vector_size, dtype="float32")
        vector = ((start - 0.5) / model.vector_size).reshape(1, -1)
        train = doc2vec_inner.train_document_dm if model.dm else \
            doc2vec_inner.train_document_dbow
        extra = (np.zeros(model.layer1_size, "float32"),) if model.dm else ()
        words, work = tokenize(text), np.zeros(model.layer1_size, "float32")
        with self._seeding:
            model.random = np.random.RandomState(seed)
            for alpha in np.linspace(model.alpha, model.min_alpha, model.epochs):
                train(model, words, [0], alpha, work, *extra, learn_words=False,
                      learn_hidden=False, doctag_vectors=vector,
                      doctags_lockf=np.ones(1, "float32"))
        return vector[0]

    def for_inference(self):
        """A copy without the training documents' own vectors (70,000 x 100 floats for
        IMDB), which inference never reads: what a served model needs."""
        model = copy.copy(self.model)
        model.dv = KeyedVectors(model.vector_size)
        return ParagraphVectors(model)

    def save(self, folder):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save(str(folder / MODEL_FILE))
        return folder

    @classmethod
    def load(cls, folder):
        return cls(Doc2Vec.load(str(Path(folder) / MODEL_FILE)))


def load_or_train(prepared_imdb, settings=ParagraphVectorSettings()):
    """(vectors, folder): the Doc2Vec model of the prepared reviews for `settings`,
    trained once on the unlabelled and train reviews (never val or test) and kept
    beside them, with the seconds it took in `training.json`."""
    folder = Path(prepared_imdb.directory) / f"doc2vec-{cache.settings_key(asdict(settings))}"

    def train(tmp):
        texts = prepared_imdb.unlabelled_texts() + prepared_imdb.texts("train")
        print(f"Training Doc2Vec on {len(texts)} reviews (once; saved to {folder})", flush=True)
        started = time.perf_counter()
        ParagraphVectors.train(texts, settings).save(tmp)
        (tmp / TIMING_FILE).write_text(json.dumps({"seconds": time.perf_counter() - started}))

    cache.write_atomically(folder, asdict(settings), train)
    return ParagraphVectors.load(folder), folder


def training_seconds(folder):
    """The seconds Doc2Vec took to train in `folder`, if recorded."""
    path = Path(folder) / TIMING_FILE
    return json.loads(path.read_text())["seconds"] if path.exists() else None


def split_vectors(prepared_imdb, split, settings=ParagraphVectorSettings()):
    """(vectors, seconds): the inferred vectors of a split's reviews, computed once and
    cached with the seconds inference took."""
    vectors, folder = load_or_train(prepared_imdb, settings)

    def infer(partial):
        started = time.perf_counter()
        inferred = vectors.infer(prepared_imdb.texts(split), f"Inferring {split} paragraph vectors")
        with open(partial, "wb") as file:
            np.savez(file, vectors=inferred, seconds=time.perf_counter() - started)

    stored = np.load(cache.produce_file(folder / f"{split}_vectors.npz", infer))
    return stored["vectors"], float(stored["seconds"])
