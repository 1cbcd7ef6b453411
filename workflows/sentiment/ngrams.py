"""The n-gram features of `bow` and `nbsvm`: the adapted vectorizer, the training texts
(with short sentence slices) and NBSVM's per-class n-gram counts."""

import keras
import numpy as np

from data_prep import imdb
from data_prep.standardize import separate_review_punctuation, standardize_review
from data_prep.text import sentence_slices
from workflows.sentiment.presets import BowConfig, NBSVMConfig

NGRAM_CONFIGS = (BowConfig, NBSVMConfig)


def ngram_vectorizer(config, prepared):
    """The n-gram `TextVectorization` of `bow` or `nbsvm`, adapted on the train split
    (deterministic, so a resumed run gets the same vectorizer back)."""
    print(f"Adapting the 1- to {config.ngrams}-gram vocabulary ({config.max_tokens} entries) "
          "on train")
    nbsvm = isinstance(config, NBSVMConfig)
    separate = nbsvm and config.punctuation == "separate"
    vectorizer = keras.layers.TextVectorization(
        max_tokens=config.max_tokens, ngrams=config.ngrams,
        standardize=separate_review_punctuation if separate else standardize_review,
        output_mode="multi_hot" if nbsvm else config.output_mode, sparse=nbsvm)
    vectorizer.adapt(imdb.text_dataset(*split_texts(config, prepared, "train"), 512)
                     .map(lambda text, label: text))
    return vectorizer


def split_texts(config, prepared, split):
    """(texts, labels) of `split`; for train, plus `sentence_slices` slices of one or two
    sentences of each review, labelled as the review (short text seen in training)."""
    texts, labels = prepared.texts(split), prepared.labels(split)
    count = getattr(config, "sentence_slices", 0) if split == "train" else 0
    if count:
        sliced = sentence_slices(texts, count, config.seed)
        texts, labels = texts + sliced, np.concatenate([labels, np.repeat(labels, count)])
    return texts, labels


def class_feature_counts(config, vectorizer, prepared):
    """(negative, positive) counts of each n-gram's presence over the training texts."""
    import tensorflow as tf  # n-gram vectorizers are TensorFlow layers

    counts = 0
    for texts, labels in imdb.text_dataset(*split_texts(config, prepared, "train"), 512):
        one_hot = tf.one_hot(labels, 2, dtype=tf.float32)
        present = tf.cast(vectorizer(texts), tf.float32)
        counts += tf.sparse.sparse_dense_matmul(present, one_hot, adjoint_a=True)
    return counts[:, 0], counts[:, 1]
