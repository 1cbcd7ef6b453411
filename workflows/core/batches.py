"""Batches of few fixed shapes for `fit`, `evaluate` and `predict`, on any backend: a
`keras.utils.PyDataset` over length buckets (`data_prep.text.BucketPlan`), and the
backend's fastest input made of it."""

import keras
import numpy as np

from data_prep.pipelines import untuned
from data_prep.text import EMPTY, BucketPlan, boundaries_up_to


class BucketedBatches(keras.utils.PyDataset):
    """Batches `make(bucket, row indices)` in the order `plan.batches(lengths, seed)`.

    Subclasses set `self.plan` and implement `make`; `order` (a list of
    `(bucket, indices)`) replaces the plan's order (resuming, a subset).
    """

    def __init__(self, plan, lengths, seed=None, order=None):
        super().__init__()
        self.plan, self.seed = plan, seed
        self.order = plan.batches(lengths, seed) if order is None else order

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        bucket, rows = self.order[index]
        return self.make(bucket, rows)

    def make(self, bucket, rows):
        raise NotImplementedError

    def with_order(self, order):
        """The same rows, batched as `order` says."""
        raise NotImplementedError

    def skip(self, count):
        """The same batches without the first `count` (resuming mid-epoch)."""
        return self.with_order(self.order[count:])

    def rows(self):
        """Every real row index, in batch order (top-up rows left out)."""
        indices = [rows[rows != EMPTY] for _, rows in self.order]
        return np.concatenate(indices) if indices else np.zeros(0, "int64")

    @property
    def shapes(self):
        """The distinct input shapes these batches reach a compiler with."""
        return sorted({self.plan.shapes[bucket] for bucket, _ in self.order})


def token_batches(ids, labels, lengths, batch_size, batch_tokens=None, seed=None,
                  bucketing=True, weights=None):
    """Labelled token id batches in a few fixed shapes, for this backend: with
    `bucketing`, rows padded to the first of `lengths` (up to the longest) that holds
    them, `batch_tokens // length` (or `batch_size`) rows a batch; else every batch
    `batch_size` rows of the full length. `weights`: each row's loss weight (1)."""
    longest = ids.shape[1]
    if bucketing:
        plan = BucketPlan(boundaries_up_to(longest, lengths), batch_tokens,
                          None if batch_tokens else batch_size)
    else:
        plan = BucketPlan.single(longest, batch_size)
    return for_backend(LabelledBatches(ids, labels, plan, seed, weights=weights))


def for_backend(batches):
    """`batches` as the fastest input of the current backend: on TensorFlow a `tf.data`
    pipeline with unknown sizes (one trace) and without the top-up rows (a replica of
    `MirroredStrategy` given only top-up rows would average its loss in as 0); the
    `PyDataset` itself elsewhere."""
    if keras.backend.backend() != "tensorflow":
        return batches
    import tensorflow as tf  # only on its backend: the JAX path runs where TF is absent

    def spec(array):
        array = np.asarray(array)
        return tf.TensorSpec((None,) * array.ndim, tf.as_dtype(array.dtype))

    signature = tf.nest.map_structure(spec, batches[0])
    dataset = tf.data.Dataset.from_generator(
        lambda: (real_rows(batches, i) for i in range(len(batches))),
        output_signature=signature)
    return untuned(dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))
                   .prefetch(2))


def real_rows(batches, index):
    """Batch `index` without its top-up rows (as it is if `batches` has none)."""
    batch = batches[index]
    order = getattr(batches, "order", None)
    if order is None:
        return batch
    real = order[index][1] != EMPTY
    return keras.tree.map_structure(lambda array: np.asarray(array)[real], batch)


def real_rows_and_weights(rows, weights=None):
    """A batch's row indices with each top-up (`EMPTY`) row replaced by a real row of the
    batch, and each row's loss weight: 0 for top-up rows, else `weights[row]` (or 1)."""
    real = rows != EMPTY
    rows = np.where(real, rows, rows[real][0])
    row_weights = real.astype("float32")
    if weights is not None:
        row_weights *= weights[rows]
    return rows, row_weights


class LabelledBatches(BucketedBatches):
    """`(ids, labels, weights)` batches of 0-padded id rows with one label each (a review
    and its sentiment): rows cut to their bucket's length, top-up rows repeating a
    real row of the batch with weight 0, real rows weighing `weights` (1 each by
    default). Compile the model with `weighted_metrics` so the top-up rows count in no
    metric."""

    def __init__(self, ids, labels, plan, seed=None, order=None, weights=None):
        self.ids, self.labels = np.asarray(ids), np.asarray(labels)
        self.weights = None if weights is None else np.asarray(weights, "float32")
        lengths = np.maximum((self.ids != 0).sum(axis=1), 1)
        super().__init__(plan, lengths, seed, order)

    def make(self, bucket, rows):
        rows, weights = real_rows_and_weights(rows, self.weights)
        return self.ids[rows, :self.plan.boundaries[bucket]], self.labels[rows], weights

    def with_order(self, order):
        return LabelledBatches(self.ids, self.labels, self.plan, order=order,
                               weights=self.weights)


