"""What every sentiment model family shares: the base config, its compiled loss and
metrics, class weights, and the batch lengths a model trains on.

A family module (`ngrams`, `rnn`, `transformer`, `doc2vec`, `encoder`, `lm_classifier`)
holds its config, its Keras network, its preprocessor (raw texts -> the network's
inputs) and `build(config, data)`, which gives the lesson a `Trainable` whose
`classifier` is the two as one Keras model (`text_classifier.TextClassifier`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workflows.core.config import (
    MAX_BATCH_SIZE,
    MAX_LEARNING_RATE,
    TrainingOptions,
    option,
    unless,
    when,
)

# ## The config every family extends

OPTIMIZERS = ("rmsprop", "adam", "adamw", "sgd", "nadam", "adagrad")
AUGMENTATIONS = ("none", "round_trip", "edit")
CLASS_WEIGHTS = ("none", "balanced", "sqrt_balanced")
MONITORS = ("val_loss", "val_accuracy", "val_macro_f1")


@dataclass(frozen=True)
class TrainConfig(TrainingOptions):
    augmentable = True  # (not a field) False where extra train rows cannot be used

    model: str = option("", help="the model family (--model)")
    batch_size: int = option(32, at_least=1, at_most=MAX_BATCH_SIZE,
                             help="texts a training step")
    optimizer: str = option("rmsprop", choices=OPTIMIZERS, help="the optimizer")
    learning_rate: float = option(0.001, above=0, at_most=MAX_LEARNING_RATE,
                                  help="its learning rate")
    val_fraction: float = option(0.2, above=0, below=1, help="share of the train texts "
                                 "held out for validation (early stopping, calibration, "
                                 "ensemble weights); members of one ensemble must share "
                                 "it; --texts: of the texts the test split leaves")
    monitor: str = option("val_loss", choices=MONITORS, help="the validation score that "
                          "chooses the best epoch and stops early: the loss (lower is "
                          "better), accuracy or macro-F1 (with rare classes that matter)")
    class_weight: str = option("none", choices=CLASS_WEIGHTS, help="balanced: each "
                               "class's train texts weigh n / (classes x its count) in the "
                               "loss, so a rare class counts as much as a common one; "
                               "sqrt_balanced: the square root of that, halfway (in log "
                               "terms) between none and balanced")
    # more train rows (`sentiment/augmentation.py`): paraphrases of the train reviews by
    # round-trip translation through the translation lesson's runs, or copies with random
    # word deletions and swaps; validation and test are never augmented
    augment: str = option("none", choices=AUGMENTATIONS, applies=when("augmentable", True),
                          help="extra train texts: edit (word deletions and swaps) or "
                               "round_trip (through the en-es translators); none")
    augment_unit: str = option("slices", choices=("slices", "reviews"),
                               applies=unless("augment", "none"),
                               help="what is augmented: sentence slices or whole reviews")
    augment_copies: int = option(1, at_least=1, at_most=8, applies=unless("augment", "none"),
                                 help="augmented copies of each")
    augment_fraction: float = option(1.0, above=0, at_most=1, applies=unless("augment", "none"),
                                     help="share of the train texts augmented")
    # the en-es and es-en translation runs (id, prefix or model URI); "": the latest
    translator: str = option("", applies=when("augment", "round_trip"),
                             help="the en-es translation run (id, prefix or model URI); "
                                  "empty: the latest")
    back_translator: str = option("", applies=when("augment", "round_trip"),
                                  help="the es-en translation run; empty: the latest")


def compiled_classifier(model, config, classes=2):
    """`model` compiled with the config's optimizer and rate, the cross-entropy of
    `classes` classes (binary for two: one sigmoid output) and accuracy (weighted: the
    rows that top up a batch to its fixed shape weigh 0)."""
    import keras

    optimizer = keras.optimizers.get({"class_name": config.optimizer,
                                      "config": {"learning_rate": config.learning_rate}})
    return compile_loss(model, optimizer, classes)


def compile_loss(model, optimizer, classes=2, one_sigmoid=True):
    """`model` compiled with `optimizer`, the cross-entropy of `classes` classes and
    the weighted accuracy and macro-F1 (`compiled_classifier`); two classes are one
    sigmoid output unless `one_sigmoid` is False (a softmax of two)."""
    import keras

    binary = classes == 2 and one_sigmoid
    model.compile(optimizer=optimizer,
                  loss="binary_crossentropy" if binary else "sparse_categorical_crossentropy",
                  metrics=[],  # (a keras-hub task adds its own by default)
                  weighted_metrics=["accuracy" if binary else
                                    keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                                    macro_f1(classes)])
    return model


def macro_f1(classes):
    """The epoch's macro-F1 (`macro_f1`, `val_macro_f1`) of `classes` classes."""
    from workflows.sentiment.f1_metric import SparseMacroF1

    return SparseMacroF1(classes)


def output_layer(classes, **kwargs):
    """The classifier's last layer: one sigmoid P(class 1) for two classes, else a
    softmax over `classes`."""
    import keras

    if classes == 2:
        return keras.layers.Dense(1, activation="sigmoid", **kwargs)
    return keras.layers.Dense(classes, activation="softmax", **kwargs)


def output_units(classes):
    """Units of the last layer: 1 (a sigmoid) for two classes, else one per class."""
    return 1 if classes == 2 else classes


def class_weights(config, labels, classes):
    """Per class index, the weight of its train rows: 1 each, or with
    `class_weight="balanced"` n / (classes * count), as scikit-learn's, or its square root
    (`sqrt_balanced`: rare classes count more, less than balanced)."""
    return weights_of_classes(config.class_weight, labels, len(classes))


def weights_of_classes(kind, labels, count):
    """`class_weights` of `count` classes for a `CLASS_WEIGHTS` `kind` and these labels."""
    if kind == "none":
        return np.ones(count, "float32")
    counts = np.bincount(np.asarray(labels), minlength=count).astype("float64")
    weights = len(labels) / (count * np.maximum(counts, 1))
    return (np.sqrt(weights) if kind == "sqrt_balanced" else weights).astype("float32")


@dataclass
class Trainable:
    """A family's model as the lesson trains it."""

    model: Any  # a compiled keras.Model
    train_batches: Callable[[int], Any]  # epoch -> that epoch's batches (same on every call)
    validation_batches: Any
    train_examples: int
    classifier: Any  # a `TextClassifier`: `predict(texts)` -> P(positive) or class rows
    tags: dict = field(default_factory=dict)
    artifacts: dict = field(default_factory=dict)  # name -> text or dict
    metrics: dict = field(default_factory=dict)


# ## What a model trains on
# Texts and their sentence slices: `data_prep.imdb.split_texts`; token id batches in
# few shapes: `core.batches.token_batches`, with these lengths.

# Padded review lengths (tokens) batches come in, up to the longest a config reads: a
# handful of shapes, each compiled once
REVIEW_LENGTHS = (64, 128, 192, 256, 384, 512, 768, 1024)
