"""The n-gram features of `bow` and `nbsvm`: the adapted vectorizer and NBSVM's per-class
n-gram counts."""

import keras

from data_prep import imdb
from data_prep.standardize import separate_review_punctuation, standardize_review
from workflows.sentiment.presets import BowConfig, NBSVMConfig
from workflows.sentiment.training_texts import split_texts

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


def class_feature_counts(config, vectorizer, prepared):
    """(negative, positive) counts of each n-gram's presence over the training texts."""
    import tensorflow as tf  # n-gram vectorizers are TensorFlow layers

    counts = 0
    for texts, labels in imdb.text_dataset(*split_texts(config, prepared, "train"), 512):
        one_hot = tf.one_hot(labels, 2, dtype=tf.float32)
        present = tf.cast(vectorizer(texts), tf.float32)
        counts += tf.sparse.sparse_dense_matmul(present, one_hot, adjoint_a=True)
    return counts[:, 0], counts[:, 1]
