"""Standardization functions for `TextVectorization`, registered so saved models load."""

import re
import string

import keras

PUNCTUATION = re.escape(string.punctuation)


@keras.saving.register_keras_serializable(package="nlpkit")
def standardize_review(texts):
    """TextVectorization standardization: lowercase, drop HTML tags, entities, punctuation.

    Used by the vectorizer inside exported models, so raw reviews (with `<br />`)
    are cleaned exactly as the training data was.
    """
    import tensorflow as tf  # only inside TextVectorization: this module loads without TF

    texts = tf.strings.lower(texts)
    texts = tf.strings.regex_replace(texts, r"<[^>]+>|&[a-z]+;|&#[0-9]+;", " ")
    return tf.strings.regex_replace(texts, f"[{PUNCTUATION}]", "")


@keras.saving.register_keras_serializable(package="nlpkit")
def separate_review_punctuation(texts):
    """Like `standardize_review`, but each punctuation mark becomes a token of its own
    ("great!" -> "great !"): n-gram models use "!" and "?" as evidence."""
    import tensorflow as tf  # likewise

    texts = tf.strings.lower(texts)
    texts = tf.strings.regex_replace(texts, r"<[^>]+>|&[a-z]+;|&#[0-9]+;", " ")
    return tf.strings.regex_replace(texts, f"([{PUNCTUATION}])", r" \1 ")


SPANISH_PUNCTUATION = re.escape(string.punctuation.replace("[", "").replace("]", "") + "¿¡")


@keras.saving.register_keras_serializable(package="nlpkit")
def standardize_spanish(texts):
    """The tutorial's Spanish standardization: lowercase, strip punctuation and `¿`/`¡`.

    Square brackets are kept so the `[start]` and `[end]` markers survive.
    """
    import tensorflow as tf  # likewise

    texts = tf.strings.lower(texts)
    return tf.strings.regex_replace(texts, f"[{SPANISH_PUNCTUATION}]", "")
