"""Teacher-forcing batches of token id pairs in a few fixed shapes, for any backend: what
both translation models train on and the translator's `score` reads."""

import numpy as np

from data_prep.text import EMPTY, BucketPlan, boundaries_every, pad_rows, take_rows
from workflows.core.batches import BucketedBatches


def truncate(rows, max_length, keep_last=False):
    """Rows cut to `max_length` ids (a target keeps its `[end]` when `keep_last`)."""
    cut = []
    for row in rows:
        if len(row) > max_length:
            row = np.concatenate([row[:max_length - 1], row[-1:]]) if keep_last \
                else row[:max_length]
        cut.append(row)
    return cut


def pair_plan(max_length, batch_tokens=None, batch_size=None, bucket_width=8):
    """Length buckets every `bucket_width` tokens up to `max_length` with batches from
    the `batch_tokens` budget, or one `(batch_size, max_length)` shape (the tutorial's
    fixed-length batches)."""
    if batch_tokens is None:
        return BucketPlan.single(max_length, batch_size)
    return BucketPlan(boundaries_every(bucket_width, max_length), batch_tokens)


class PairBatches(BucketedBatches):
    """Teacher-forcing batches: `({"source", "target": ids[:-1]}, ids[1:], label mask)`.

    A pair goes to the bucket that holds both its source and its target input
    (`len(target) - 1`); both are padded to the bucket's length. Top-up rows repeat
    a real pair of the batch with labels that weigh 0, so the loss and metrics are
    unchanged (and no row is all padding).
    """

    def __init__(self, source, target, plan, seed=None, order=None):
        self.source, self.target = source, target
        lengths = [max(len(s), len(t) - 1) for s, t in zip(source, target, strict=True)]
        super().__init__(plan, lengths, seed, order)

    def make(self, bucket, rows):
        length = self.plan.boundaries[bucket]
        real = rows != EMPTY
        rows = np.where(real, rows, rows[real][0])  # top-up rows: a real pair that weighs 0
        target = pad_rows(take_rows(self.target, rows), length + 1)
        labels = target[:, 1:]
        weights = (labels != 0) & real[:, None]
        return ({"source": pad_rows(take_rows(self.source, rows), length),
                 "target": target[:, :-1]}, labels, weights.astype("float32"))

    def with_order(self, order):
        return PairBatches(self.source, self.target, self.plan, order=order)

    def target_tokens(self):
        """Target tokens predicted in an epoch (padding left out)."""
        return int(sum(len(self.target[i]) - 1 for i in self.rows()))


def batch_plan(config):
    """The fixed batch shapes of a config (`pair_plan`)."""
    return pair_plan(config.sequence_length, config.batch_tokens if config.bucketing else None,
                     config.batch_size, config.bucket_width)
