"""A classifier over paragraph vectors: raw reviews in, P(positive) out.

`ParagraphVectorClassifier.save(folder)` writes the Keras model (vector in,
P(positive) out) and the Doc2Vec model that infers each review's vector (without its
training reviews' own vectors, which inference never reads);
`load(folder).predict(texts)` does both steps.
"""

from pathlib import Path

import keras
import numpy as np

from data_prep.paragraph_vectors import ParagraphVectors
from workflows.core.compilation import compiled
from workflows.sentiment.classifier_folder import read_folder, save_folder

KIND = "paragraph_vectors"  # the `kind` in classifier.json (see `sentiment/classifiers.py`)


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
        save_folder(folder, self.model, {"kind": KIND})
        self.vectors.for_inference().save(Path(folder) / "doc2vec")
        return Path(folder)

    @classmethod
    def load(cls, folder):
        model, _, _ = read_folder(folder)
        return cls(model, ParagraphVectors.load(Path(folder) / "doc2vec"))
