"""The texts a sentiment model trains on: a split's reviews, and for train the short
sentence slices of them that `nbsvm` and `encoder` add (no TensorFlow)."""

import numpy as np

from data_prep.text import sentence_slices


def split_texts(config, prepared, split):
    """(texts, labels) of `split`; for train, plus `sentence_slices` slices of one or two
    sentences of each review (from `slices_from`), labelled as the review (short text
    seen in training)."""
    texts, labels = prepared.texts(split), prepared.labels(split)
    count = getattr(config, "sentence_slices", 0) if split == "train" else 0
    if count:
        sliced = sentence_slices(texts, count, config.seed, config.slices_from)
        texts, labels = texts + sliced, np.concatenate([labels, np.repeat(labels, count)])
    return texts, labels
