"""tf.data pipelines that let go at once.

For every iterator of a pipeline whose autotuning is on (tf.data's default), TensorFlow
runs a thread that re-tunes the pipeline at doubling intervals, up to a minute; deleting
the iterator waits for that thread's current interval to end (TensorFlow 2.21). Keras
makes a new iterator in every `fit`, `evaluate` and `predict` call, and the lessons call
`fit` once per epoch: with autotuning on, on a busy machine, epochs of 12 s lost 6 s
each, idle (`benchmarks/tf_data_release.py`). The kit's pipelines therefore run untuned,
and so does any pipeline given to the trainer (`workflows/core/fitting.py`): a parallel
`map` asked for `AUTOTUNE` then makes one call per core, and prefetching keeps its
fixed buffer.
"""

import sys


def untuned(dataset):
    """`dataset` with tf.data's autotuning off, so its iterators end without waiting;
    anything but a `tf.data.Dataset` (a `PyDataset`, arrays, None) as it is."""
    tf = sys.modules.get("tensorflow")  # not imported: no tf.data pipeline can exist
    if tf is None or not isinstance(dataset, tf.data.Dataset):
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
