"""The prepared IMDB token ids, as the RNNs and the Transformer read them: their batches,
and the classifier's preprocessor, the vectorizer in plain Python (`ReviewTokens`: it
trains, serves and predicts without TensorFlow).

`ReviewTokens` turns raw texts into the token ids the prepared data holds
(`data_prep.imdb.ReviewVectorizer`), every row cut or padded to the sequence length:
one shape.
"""

import keras

import layers
from data_prep.imdb import ReviewVectorizer
from workflows.core.batches import token_batches
from workflows.sentiment.family import REVIEW_LENGTHS, Trainable, class_weights
from workflows.sentiment.text_classifier import PACKAGE, TextClassifier, TextPreprocessor


@keras.saving.register_keras_serializable(package=PACKAGE)
class ReviewTokens(TextPreprocessor):
    """Texts -> `(texts, sequence_length)` token ids of the prepared vocabulary."""

    def __init__(self, vocabulary=None, sequence_length=600, standardize="review", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length, self.standardize = sequence_length, standardize
        self.vectorizer = None if vocabulary is None else \
            ReviewVectorizer(vocabulary, sequence_length, standardize)

    def encode(self, texts):
        return self.vectorizer(texts)

    def assets(self):
        return {"vocabulary": self.vectorizer.vocabulary}

    def restore(self, assets):
        self.vectorizer = ReviewVectorizer(assets["vocabulary"], self.sequence_length,
                                           self.standardize)

    def get_config(self):
        return {**super().get_config(), "sequence_length": self.sequence_length,
                "standardize": self.standardize}


def trainable(config, prepared, model, bucketing, **extra):
    """`model` trained on the prepared token ids (shuffled with a per-epoch seed), served
    as a `TextClassifier` that reads raw texts; `extra`: the `Trainable`'s tags,
    artifacts, metrics."""
    weights = class_weights(config, prepared.labels("train"), prepared.classes)

    def batches(split, epoch=None):
        labels = prepared.labels(split)
        return token_batches(prepared.token_ids(split), labels, REVIEW_LENGTHS,
                             config.batch_size, getattr(config, "batch_tokens", None),
                             None if epoch is None else config.seed + epoch, bucketing,
                             weights[labels] if split == "train" else None)

    vocabulary = prepared.vocabulary()
    tokens = ReviewTokens(vocabulary, prepared.settings.sequence_length,
                          prepared.settings.standardize)
    classifier = TextClassifier(model, tokens, prepared.classes, requires=[layers.__name__],
                                batch_size=64)
    extra["artifacts"] = {**extra.get("artifacts", {}), "vocabulary.txt": "\n".join(vocabulary)}
    return Trainable(model, lambda epoch: batches("train", epoch), batches("val"),
                     len(prepared.labels("train")), classifier, **extra)
