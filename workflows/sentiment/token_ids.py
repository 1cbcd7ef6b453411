"""The prepared IMDB token ids, as the RNNs and the Transformer read them: their batches,
and their classifier, whose preprocessor (`preprocessors.ReviewTokens`) is the vectorizer
in plain Python: it trains, serves and predicts without TensorFlow."""

import layers
from workflows.core.batches import token_batches
from workflows.sentiment.family import REVIEW_LENGTHS, Trainable, class_weights
from workflows.sentiment.preprocessors import ReviewTokens
from workflows.sentiment.text_classifier import TextClassifier


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
