"""Next-token training windows cut from a stream of token ids, for any backend."""

import keras
import numpy as np


class WindowBatches(keras.utils.PyDataset):
    """Batches of `(ids[:-1], ids[1:])` windows of `length + 1` tokens from `stream`.

    Windows start every `length` tokens (each token is predicted once per pass). With
    a `seed`, `steps` batches of windows are drawn in a seeded order (an epoch of a
    fixed size, however long the corpus); without, every window once, in order.
    """

    def __init__(self, stream, length, batch_size, seed=None, steps=None, starts=None):
        super().__init__()
        if len(stream) < length + 1:  # a short split: pad (id 0, ignored by the loss)
            stream = np.pad(stream, (0, length + 1 - len(stream)))
        self.stream, self.length, self.batch_size = stream, length, batch_size
        if starts is None:
            starts = np.arange(0, max(len(stream) - length - 1, 0) + 1, length)
            if seed is not None:
                rng = np.random.default_rng(seed)
                count = steps * batch_size if steps else len(starts)
                starts = rng.permutation(starts) if count <= len(starts) \
                    else rng.choice(starts, count)
                starts = starts[:count]
        self.starts = starts

    def __len__(self):
        return -(-len(self.starts) // self.batch_size)

    def __getitem__(self, index):
        starts = self.starts[index * self.batch_size:(index + 1) * self.batch_size]
        windows = np.stack([self.stream[s:s + self.length + 1] for s in starts])
        return windows[:, :-1], windows[:, 1:]

    def skip(self, count):
        """The same batches without the first `count` (resuming mid-epoch)."""
        return WindowBatches(self.stream, self.length, self.batch_size,
                             starts=self.starts[count * self.batch_size:])

    @property
    def tokens(self):
        return len(self.starts) * self.length


def for_backend(batches):
    """`WindowBatches` as a prefetched `tf.data` pipeline on TensorFlow, as they are else."""
    if keras.backend.backend() != "tensorflow":
        return batches
    import tensorflow as tf  # only on its backend: the JAX path runs where TF is absent

    spec = tf.TensorSpec((None, batches.length), tf.int32)
    dataset = tf.data.Dataset.from_generator(
        lambda: (batches[i] for i in range(len(batches))), output_signature=(spec, spec))
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)
