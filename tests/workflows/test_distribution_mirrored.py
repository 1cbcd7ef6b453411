"""Two logical CPU devices under `MirroredStrategy` train the tiny translator like one.

In a file of its own so that the test runner can run it beside the JAX checks.
"""

import pytest

from tests.workflows.test_distribution import (
    TRANSLATOR,
    check_trained_like_one_device,
    finish,
    start,
)


@pytest.mark.slow
def test_two_tensorflow_devices_train_like_one(tmp_path):
    pytest.importorskip("tensorflow")
    argv = [*TRANSLATOR, "--epochs", "2"]
    single = start(tmp_path / "single", "translation", argv, "none", backend="tensorflow")
    mirrored = start(tmp_path / "mirrored", "translation", argv, "mirrored",
                     backend="tensorflow")
    check_trained_like_one_device(finish(mirrored)[0], finish(single)[0], 2, "mirrored")
