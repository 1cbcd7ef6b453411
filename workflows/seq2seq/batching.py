"""Teacher-forcing batches of token id pairs, bucketed by length, for any backend."""

import keras
import numpy as np

from data_prep.padding import pad_rows


def truncate(rows, max_length, keep_last=False):
    """Rows cut to `max_length` ids (a target keeps its `[end]` when `keep_last`)."""
    cut = []
    for row in rows:
        if len(row) > max_length:
            row = np.concatenate([row[:max_length - 1], row[-1:]]) if keep_last \
                else row[:max_length]
        cut.append(row)
    return cut


def batches_of(count, batch_size, seed=None, lengths=None, window=50):
    """Row indices of each batch: in order, or shuffled with `seed`; with `lengths`,
    rows of similar length together (sorted within windows of `window` batches), the
    batches themselves then shuffled too."""
    indices = np.arange(count) if seed is None else np.random.default_rng(seed).permutation(
        count)
    if lengths is not None:
        lengths, size = np.asarray(lengths), batch_size * window
        indices = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                                  for chunk in np.split(indices, range(size, count, size))])
    batches = [indices[i:i + batch_size] for i in range(0, count, batch_size)]
    if seed is not None:
        np.random.default_rng(seed + 1).shuffle(batches)
    return batches


class PairBatches(keras.utils.PyDataset):
    """Teacher-forcing batches: `({"source", "target": ids[:-1]}, ids[1:], label mask)`.

    `fixed_length` pads every batch to the same size (the tutorial); otherwise
    sentences of similar length are batched together (sorted within windows of 50
    batches, seeded) and each batch is padded to its longest sentence rounded up to
    `multiple`, which removes most padding work from short-sentence corpora.
    """

    def __init__(self, source, target, batch_size, seed=None, fixed_length=None, multiple=4,
                 order=None):
        super().__init__()
        self.source, self.target = source, target
        self.fixed_length, self.multiple = fixed_length, multiple
        self.order = order if order is not None else self._batch_order(batch_size, seed)

    def _batch_order(self, batch_size, seed):
        lengths = None if self.fixed_length else [len(t) for t in self.target]
        return batches_of(len(self.source), batch_size, seed, lengths)

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        rows = self.order[index]
        source = [self.source[i] for i in rows]
        target = [self.target[i] for i in rows]
        source_length = self.fixed_length or self._rounded(max(map(len, source)))
        target_length = (self.fixed_length + 1) if self.fixed_length \
            else self._rounded(max(map(len, target)) - 1) + 1
        target = pad_rows(target, target_length)
        labels = target[:, 1:]
        return ({"source": pad_rows(source, source_length), "target": target[:, :-1]}, labels,
                (labels != 0).astype("float32"))

    def _rounded(self, length):
        return max(self.multiple, -(-length // self.multiple) * self.multiple)

    def skip(self, count):
        """The same batches without the first `count` (resuming mid-epoch)."""
        return PairBatches(self.source, self.target, None, fixed_length=self.fixed_length,
                           multiple=self.multiple, order=self.order[count:])

    def target_tokens(self):
        return int(sum(len(self.target[i]) - 1 for rows in self.order for i in rows))


def as_tf_dataset(batches):
    """A `tf.data` pipeline over `PairBatches` with dynamic shapes (TensorFlow backend)."""
    import tensorflow as tf  # only on its backend: the JAX path runs where TF is absent

    spec = tf.TensorSpec((None, None), tf.int32)
    signature = ({"source": spec, "target": spec}, spec, tf.TensorSpec((None, None), tf.float32))
    dataset = tf.data.Dataset.from_generator(
        lambda: (batches[i] for i in range(len(batches))), output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)


def for_backend(batches):
    """`PairBatches` as the fastest input for the current Keras backend."""
    return as_tf_dataset(batches) if keras.backend.backend() == "tensorflow" else batches


