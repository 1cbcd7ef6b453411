"""Two JAX processes train the tiny IMDB BiLSTM like one device (its `tf.data` input).

In a file of its own so that the test runner can run it beside the translator's
distribution tests.
"""

import pytest

from tests.workflows.test_distribution import (
    IMDB,
    check_trained_like_one_device,
    finish,
    start,
    start_processes,
)


@pytest.mark.slow
def test_two_jax_processes_train_the_imdb_model_like_one_device(tmp_path):
    pytest.importorskip("jax")
    single = start(tmp_path / "single", "imdb_sentiment", IMDB, "none")
    chief, worker = (finish(process)[0]
                     for process in start_processes(tmp_path / "parallel", "imdb_sentiment", IMDB))
    assert worker == {"code": 0}
    check_trained_like_one_device(chief, finish(single)[0], 2, "data_parallel")
