"""tf.data pipelines that let go at once.

For every iterator of a pipeline whose autotuning is on (tf.data's default), TensorFlow
runs a thread that re-tunes the pipeline at doubling intervals, up to a minute; deleting
the iterator waits for that thread's current interval to end (TensorFlow 2.21). Keras
makes a new iterator in every `fit`, `evaluate` and `predict` call, and the lessons call
`fit` once per epoch: with autotuning on, an epoch of 12 s lost another 8 s, idle, at
its end (`benchmarks/tf_data_release.py`). The kit's pipelines therefore run untuned:
a parallel `map` asked for `AUTOTUNE` then uses one call per core, and prefetching
keeps its fixed buffer.
"""


def untuned(dataset):
    """`dataset` with tf.data's autotuning off, so its iterators end without waiting."""
    import tensorflow as tf  # tf.data only: the JAX path never builds these pipelines

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
