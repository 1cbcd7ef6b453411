"""A classifier over paragraph vectors: raw reviews in, P(positive) out.

`ParagraphVectorClassifier.save(folder)` writes the Keras model (vector in,
P(positive) out) and the Doc2Vec model that infers each review's vector (without its
training reviews' own vectors, which inference never reads);
`load(folder).predict(texts)` does both steps.
"""

import json
from pathlib import Path

import keras
import numpy as np

from data_prep.paragraph_vectors import ParagraphVectors
from data_prep.runtime import compiled

KIND = "paragraph_vectors"  # the `kind` in classifier.json (see `sentiment/pyfunc.py`)
SETTINGS_FILE = "classifier.json"


class ParagraphVectorClassifier:
    def __init__(self, model, vectors):
        self.model, self.vectors = model, vectors
        self._forward = compiled(lambda x: self.model(x, training=False), model,
                                 tf_signature=[((None, vectors.vector_size), "float32")])

    def predict(self, texts):
        """P(positive) of each text."""
        vectors = self.vectors.infer(list(texts))
        return np.asarray(keras.ops.convert_to_numpy(self._forward(vectors)))[:, 0]

    def save(self, folder):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save(folder / "model.keras")
        self.vectors.for_inference().save(folder / "doc2vec")
        (folder / SETTINGS_FILE).write_text(json.dumps({"kind": KIND}))
        return folder

    @classmethod
    def load(cls, folder):
        folder = Path(folder)
        model = keras.saving.load_model(folder / "model.keras", compile=False)
        return cls(model, ParagraphVectors.load(folder / "doc2vec"))
