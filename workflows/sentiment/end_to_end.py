"""A Keras model that takes raw review strings (TensorFlow's `TextVectorization`
inside: the n-gram models), saved as a classifier folder like the others."""

import numpy as np

import data_prep.standardize  # noqa: F401  registers the standardization in the model
import layers  # noqa: F401  registers the custom layers
from workflows.sentiment.classifier_folder import read_folder, save_folder

KIND = "end_to_end"


class EndToEndClassifier:
    def __init__(self, model, batch_size=64):
        self.model, self.batch_size = model, batch_size

    def predict(self, texts):
        """P(positive) of each text."""
        import tensorflow as tf  # the model's TextVectorization reads tf.data strings

        batches = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string))
        probabilities = self.model.predict(batches.batch(self.batch_size), verbose=0)
        return np.asarray(probabilities, "float64").reshape(-1)

    def save(self, folder):
        return save_folder(folder, self.model, {"kind": KIND})

    @classmethod
    def load(cls, folder):
        return cls(read_folder(folder, compile=True)[0])
