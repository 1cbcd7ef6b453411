"""The prepared IMDB token ids, as the RNNs and the Transformer read them: their batches,
and their classifier, with the vectorizer in plain Python (it trains, serves and
predicts without TensorFlow).

`TokenClassifier.save(folder)` writes the Keras model (token ids in, P(positive)
out), the vocabulary and the sequence length; `TokenClassifier.load(folder)
.predict(texts)` vectorizes raw reviews exactly as the prepared data was
(`data_prep.imdb.ReviewVectorizer`) and scores them in batches of one shape.
"""

import keras
import numpy as np

import layers  # noqa: F401  registers the layers a saved model uses
from data_prep.imdb import ReviewVectorizer
from workflows.core.batches import token_batches
from workflows.core.compilation import compiled
from workflows.sentiment.family import (
    REVIEW_LENGTHS,
    Trainable,
    class_rows,
    class_weights,
    read_folder,
    save_folder,
)

KIND = "token_ids"


def trainable(config, prepared, model, bucketing, **extra):
    """`model` trained on the prepared token ids (shuffled with a per-epoch seed),
    served by a `TokenClassifier`; `extra`: the `Trainable`'s tags, artifacts, metrics."""
    weights = class_weights(config, prepared.labels("train"), prepared.classes)

    def batches(split, epoch=None):
        labels = prepared.labels(split)
        return token_batches(prepared.token_ids(split), labels, REVIEW_LENGTHS,
                             config.batch_size, getattr(config, "batch_tokens", None),
                             None if epoch is None else config.seed + epoch, bucketing,
                             weights[labels] if split == "train" else None)

    vocabulary = prepared.vocabulary()
    classifier = TokenClassifier(model, vocabulary, prepared.settings.sequence_length,
                                 standardize=prepared.settings.standardize)
    extra["artifacts"] = {**extra.get("artifacts", {}), "vocabulary.txt": "\n".join(vocabulary)}
    return Trainable(model, lambda epoch: batches("train", epoch), batches("val"),
                     len(prepared.labels("train")), classifier, **extra)


class TokenClassifier:
    def __init__(self, model, vocabulary, sequence_length, batch_size=64,
                 standardize="review"):
        self.model, self.batch_size = model, batch_size
        self.vectorizer = ReviewVectorizer(vocabulary, sequence_length, standardize)
        self._forward = compiled(lambda ids: self.model(ids, training=False), model)

    def predict(self, texts):
        """P(positive) of each text, or with more classes each text's row of class
        probabilities, in batches of `batch_size` (the last one padded)."""
        ids = self.vectorizer(list(texts))
        probabilities = []
        for start in range(0, len(ids), self.batch_size):
            batch = ids[start:start + self.batch_size]
            padded = np.concatenate([batch, np.zeros((self.batch_size - len(batch),
                                                      ids.shape[1]), "int32")])
            output = keras.ops.convert_to_numpy(self._forward(padded))
            probabilities.append(class_rows(output.reshape(len(padded), -1)[:len(batch)]))
        return np.concatenate(probabilities) if probabilities else np.zeros(0)

    def save(self, folder):
        return save_folder(folder, self.model, KIND,
                           {"sequence_length": self.vectorizer.sequence_length,
                            "standardize": self.vectorizer.standardize},
                           self.vectorizer.vocabulary)

    @classmethod
    def load(cls, folder):
        model, settings, vocabulary = read_folder(folder, KIND)
        return cls(model, vocabulary, settings["sequence_length"],
                   standardize=settings.get("standardize", "review"))

