"""Next-token training windows cut from a stream of token ids, for any backend."""

import keras
import numpy as np


class WindowBatches(keras.utils.PyDataset):
    """Batches of `(ids[:-1], ids[1:], label weights)` windows of `length + 1` tokens from `stream`.

    Windows start every `length` tokens (each token is predicted once per pass). With
    a `seed`, `steps` batches of windows are drawn in a seeded order (an epoch of a
    fixed size, however long the corpus); without, every window once, in order.
    Every batch is `(batch_size, length)`, a short last one topped up with windows of
    padding: one shape to compile. Padding weighs 0 by where it is, never by its id (a
    pretrained tokenizer's id 0 is a real token: GPT-2's `!`).
    """

    def __init__(self, stream, length, batch_size, seed=None, steps=None, starts=None,
                 real=None):
        super().__init__()
        self.real = len(stream) if real is None else real  # tokens before any padding
        if len(stream) < length + 1:  # a short split: padded (weight 0)
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
        windows = np.zeros((self.batch_size, self.length + 1), self.stream.dtype)
        weights = np.zeros((self.batch_size, self.length), "float32")
        for row, start in enumerate(starts):
            windows[row] = self.stream[start:start + self.length + 1]
            weights[row, :max(0, min(self.length, self.real - 1 - start))] = 1.0
        return windows[:, :-1], windows[:, 1:], weights

    def skip(self, count):
        """The same batches without the first `count` (resuming mid-epoch)."""
        return WindowBatches(self.stream, self.length, self.batch_size,
                             starts=self.starts[count * self.batch_size:], real=self.real)

    @property
    def tokens(self):
        return len(self.starts) * self.length
