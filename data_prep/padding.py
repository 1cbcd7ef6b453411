"""Token id rows as one 0-padded array (plain numpy: any backend, no TensorFlow)."""

import numpy as np


def pad_rows(rows, length):
    """`(len(rows), length)` int32 ids: each row from the left, zeros after it."""
    batch = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    return batch
