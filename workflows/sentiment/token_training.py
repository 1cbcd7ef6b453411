"""Training on token ids: the batches every token-id model trains on (reviews padded to a
few fixed lengths, bucketed by length where the config asks), and the plan of the models
on the prepared ids (RNNs and Transformers)."""

import dataclasses

from data_prep.batches import LabelledBatches, for_backend
from data_prep.buckets import BucketPlan, boundaries_up_to
from workflows.core.lesson import TrainingPlan
from workflows.sentiment.presets import EncoderConfig, LMClassifierConfig, build_model
from workflows.sentiment.token_classifier import TokenClassifier

# Padded review lengths (tokens) batches come in, up to the longest a config reads: a
# handful of shapes, each compiled once
REVIEW_LENGTHS = (64, 128, 192, 256, 384, 512, 768, 1024)


def review_batches(config, ids, labels, seed=None):
    """Token id batches in the config's few fixed shapes: with bucketing, reviews padded
    to the first of `REVIEW_LENGTHS` that holds them, `batch_tokens // length` (or
    `batch_size`) per batch; else every batch `batch_size` x the full length."""
    longest, tokens = ids.shape[1], getattr(config, "batch_tokens", None)
    if isinstance(config, (LMClassifierConfig, EncoderConfig)) \
            or getattr(config, "bucketing", False):
        plan = BucketPlan(boundaries_up_to(longest, REVIEW_LENGTHS), tokens,
                          None if tokens else config.batch_size)
    else:
        plan = BucketPlan.single(longest, config.batch_size)
    return for_backend(LabelledBatches(ids, labels, plan, seed))


def batches(config, prepared, split, epoch=None):
    """The (prepared token ids, label) batches of `split`; shuffled with a per-epoch seed
    if `epoch`."""
    return review_batches(config, prepared.token_ids(split), prepared.labels(split),
                          None if epoch is None else config.seed + epoch)


def plan(config, prepared, export, embeddings=None, coverage=None):
    """The model on the prepared token ids (its embedding layer starting from
    `embeddings`, GloVe or Word2Vec, if given), served with their vectorizer in plain
    Python. `export` says how the classifier is logged; its `save` is filled in here."""
    vocabulary = prepared.vocabulary()
    model = build_model(config, len(vocabulary), embeddings)
    classifier = TokenClassifier(model, vocabulary, prepared.settings.sequence_length)
    return TrainingPlan(
        model, lambda epoch: batches(config, prepared, "train", epoch),
        batches(config, prepared, "val"), len(prepared.labels("train")),
        export=dataclasses.replace(export, save=classifier.save),
        tags={"model_family": type(config).__name__.removesuffix("Config").lower()},
        artifacts={"embedding_coverage.json": coverage} if coverage else {},
        metrics={"embedding_coverage": coverage["fraction"]} if coverage else {})
