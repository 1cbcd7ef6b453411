"""Fixed batch shapes for sequences of many lengths: length buckets and a token budget.

A compiler (XLA under JAX, `tf.function` under TensorFlow) builds one program per
input shape, so batches padded to their own longest row compile a step per batch.
`BucketPlan` allows a handful of shapes instead: each row goes to the first bucket
whose fixed boundary holds it, and a bucket's batches hold `batch_tokens // boundary`
rows (as fairseq's `--max-tokens`: short sentences travel in large batches, long ones
in small, and every batch costs about the same), or a fixed number of `rows`. The
last batch of each bucket is filled with other rows of the bucket (training) or
topped up with empty rows (index -1, spread among the real ones; evaluation), so a
whole epoch uses exactly one shape per bucket; `pad_rows` pads a batch's rows to its
shape. Pure NumPy: the batches a lesson builds from it run on any backend.
"""

from dataclasses import dataclass

import numpy as np

# Padded lengths tried in order; a plan keeps those below its longest length.
LADDER = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
EMPTY = -1  # the row index of a top-up row


def boundaries_up_to(max_length, ladder=LADDER):
    """`ladder`'s lengths below `max_length`, then `max_length`: 40 -> (8, 16, 24, 32, 40)."""
    return tuple(length for length in ladder if length < max_length) + (max_length,)


def boundaries_every(width, max_length):
    """Multiples of `width` below `max_length`, then `max_length`: 16, 40 -> (16, 32, 40)."""
    return boundaries_up_to(max_length, range(width, max_length, width))


@dataclass(frozen=True)
class BucketPlan:
    """Batch shapes: `(batch_size(b), boundaries[b])` for each bucket `b`.

    Args:
        boundaries: ascending padded lengths; the last is the longest row allowed.
        batch_tokens: padded tokens per batch (rows x length); each bucket's batch size
            is the largest multiple of `multiple` within it, at least `multiple`.
        rows: instead of `batch_tokens`, the same batch size for every bucket.
        multiple: batch sizes from `batch_tokens` are multiples of this (devices and
            tensor cores like 8).
    """

    boundaries: tuple
    batch_tokens: int | None = None
    rows: int | None = None
    multiple: int = 8

    def __post_init__(self):
        if list(self.boundaries) != sorted(set(self.boundaries)) or self.boundaries[0] < 1:
            raise ValueError(f"Bucket boundaries must ascend from 1 up, got {self.boundaries}.")
        if (self.batch_tokens is None) == (self.rows is None):
            raise ValueError("Give either batch_tokens or rows.")
        if min(self.batch_tokens or self.rows, self.multiple) < 1:
            raise ValueError("batch_tokens, rows and multiple must be positive.")

    @classmethod
    def single(cls, length, batch_size):
        """One shape, `(batch_size, length)`: fixed-length batches (no bucketing)."""
        return cls((length,), rows=batch_size)

    def batch_size(self, bucket):
        if self.rows:
            return self.rows
        rows = self.batch_tokens // self.boundaries[bucket]
        return max(self.multiple, rows // self.multiple * self.multiple)

    @property
    def shapes(self):
        return [(self.batch_size(b), length) for b, length in enumerate(self.boundaries)]

    def bucket_of(self, lengths):
        """Each length's bucket (lengths beyond the last boundary go to the last bucket)."""
        buckets = np.searchsorted(self.boundaries, np.asarray(lengths), side="left")
        return np.minimum(buckets, len(self.boundaries) - 1)

    def batches(self, lengths, seed=None):
        """`[(bucket, row indices)]`, every batch of its bucket's size, every row in one.

        Without `seed` (evaluation): in order of bucket and row, each bucket's last
        batch topped up with `EMPTY` rows. With `seed` (an epoch of training): rows
        shuffled within their bucket, the last batch filled with other rows of the
        bucket drawn at random (seen twice this epoch; `EMPTY` only where the bucket is
        smaller than a batch), and the batches shuffled.
        """
        buckets = self.bucket_of(lengths)
        rng = None if seed is None else np.random.default_rng(seed)
        batches = []
        for bucket in range(len(self.boundaries)):
            rows = np.flatnonzero(buckets == bucket)
            if rng is not None:
                rows = rng.permutation(rows)
            size = self.batch_size(bucket)
            for start in range(0, len(rows), size):
                chunk = rows[start:start + size]
                if rng is not None and len(chunk) < size:
                    others = rows[:start]  # the bucket's rows not in this batch
                    chunk = np.concatenate([chunk, rng.permutation(others)[:size - len(chunk)]])
                batches.append((bucket, topped_up(chunk, size)))
        if rng is not None:
            rng.shuffle(batches)
        return batches

    def padding_share(self, lengths):
        """The share of the batches' tokens that is padding (top-up rows included)."""
        lengths = np.asarray(lengths)
        padded = sum(len(rows) * self.boundaries[bucket] for bucket, rows in self.batches(lengths))
        return 1.0 - float(np.minimum(lengths, self.boundaries[-1]).sum()) / max(padded, 1)


def topped_up(rows, size):
    """`rows` spread evenly over `size` places, `EMPTY` between them: when devices split
    a batch into contiguous shards, none gets top-up rows alone."""
    batch = np.full(size, EMPTY, dtype=np.asarray(rows).dtype if len(rows) else "int64")
    batch[np.linspace(0, size, len(rows), endpoint=False).astype(int)] = rows
    return batch


def take_rows(rows, indices):
    """`rows[i]` for each of `indices`."""
    return [rows[i] for i in indices]


def pad_rows(rows, length):
    """`(len(rows), length)` int32 ids: each row from the left, zeros after it."""
    batch = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    return batch
