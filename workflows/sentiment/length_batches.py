"""Scoring token id rows in batches of similar length: few shapes to compile."""

import keras
import numpy as np

from data_prep.padding import pad_rows


def score_rows(forward, rows, batch_size, width):
    """`forward`'s P(positive) of each token id row, scored shortest first in batches of
    `batch_size` rows padded to `width(longest row)`; a short last batch is topped up
    with empty rows, so each width is one shape."""
    probabilities = np.zeros(len(rows))
    order = np.argsort([len(row) for row in rows], kind="stable")
    for start in range(0, len(rows), batch_size):
        batch = order[start:start + batch_size]
        ids = pad_rows([rows[i] for i in batch] + [[]] * (batch_size - len(batch)),
                       width(max(len(rows[i]) for i in batch)))
        probabilities[batch] = keras.ops.convert_to_numpy(forward(ids))[:len(batch), 0]
    return probabilities
