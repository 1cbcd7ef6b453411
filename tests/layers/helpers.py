"""Small utilities for the layer tests."""

import numpy as np
from keras import ops


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def assert_close(actual, expected, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=atol, rtol=rtol)


def random_ids(batch, length, vocab_size, seed=0):
    """Token ids in [1, vocab_size): no padding."""
    return np.random.default_rng(seed).integers(1, vocab_size, size=(batch, length)).astype("int32")


def pad(ids, extra):
    return np.pad(ids, ((0, 0), (0, extra)))
