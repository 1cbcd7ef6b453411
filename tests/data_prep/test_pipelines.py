"""The kit's tf.data pipelines run untuned, so an iterator that Keras drops at the end of
an epoch, a validation or a prediction ends at once (data_prep/pipelines.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from data_prep import imdb
from data_prep.pipelines import untuned
from data_prep.text import BucketPlan
from workflows.core.batches import LabelledBatches, for_backend


def autotuned(dataset):
    return dataset.options().autotune.enabled is not False


def test_untuned_turns_autotuning_off_and_keeps_the_data():
    dataset = tf.data.Dataset.range(10).batch(3)
    assert autotuned(dataset)
    plain = untuned(dataset)
    assert not autotuned(plain) and not autotuned(plain.map(lambda x: x + 1))
    assert [list(batch.numpy()) for batch in plain] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    arrays = (np.zeros((2, 3)), np.ones(2))
    assert untuned(arrays) is arrays and untuned(None) is None


def test_the_trainer_hands_keras_any_given_pipeline_untuned(tmp_path):
    from workflows.core.fitting import fit_resumably
    from workflows.core.stopping import Stopping

    features = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    labels = (features.sum(axis=1) > 0).astype("float32")

    def batches(epoch=None):
        return tf.data.Dataset.from_tensor_slices((features, labels)).batch(4)

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    given = []

    def recorded(method):
        def call(data, *args, **kwargs):
            given.append(autotuned(data))
            return method(data, *args, **kwargs)
        return call

    model.fit, model.evaluate = recorded(model.fit), recorded(model.evaluate)
    fit_resumably(model, batches, batches(), tmp_path, Stopping(2), verbose=0)
    assert given == [False] * 4  # each epoch's fit and evaluate


@pytest.mark.parametrize("shuffle", [False, True])
def test_review_batches_are_untuned_after_any_map(shuffle):
    texts, labels = ["good", "bad", "fine", "dull"], np.array([1, 0, 1, 0])
    dataset = imdb.text_dataset(texts, labels, batch_size=2, shuffle=shuffle, seed=3)
    assert not autotuned(dataset)
    assert not autotuned(dataset.map(lambda text, label: (tf.strings.length(text), label),
                                     num_parallel_calls=tf.data.AUTOTUNE))
    assert sorted(text.decode() for batch, _ in dataset for text in batch.numpy()) == \
        sorted(texts)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.data on TensorFlow")
def test_token_batches_for_tensorflow_are_untuned():
    ids = np.array([[5, 6, 0], [7, 0, 0], [8, 9, 4], [3, 0, 0]], "int32")
    batches = LabelledBatches(ids, np.array([1, 0, 1, 0]), BucketPlan.single(3, 2))
    dataset = for_backend(batches)
    assert not autotuned(dataset)
    assert sum(len(labels) for _, labels, _ in dataset) == 4
