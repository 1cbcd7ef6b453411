"""Token embedding plus position information, the input block of a Transformer."""

import math

import keras
from keras import ops

from layers.sine_position_encoding import SinePositionEncoding
from layers.validation import require_positive_ints

POSITION_KINDS = ("learned", "sine")


@keras.saving.register_keras_serializable(package="nlpkit")
class PositionalEmbedding(keras.layers.Layer):
    """Token embeddings plus learned (or sinusoidal) position embeddings.

    The tutorial's `PositionalEmbedding`: `x = E_token[ids] + E_pos[0..n-1]`, so the
    model knows word order (self-attention alone is permutation invariant). With
    `position="sine"` the learned table is replaced by the fixed encoding of
    `SinePositionEncoding` (Vaswani et al., section 3.5), which has no weights.

    Masking: token id 0 is padding; `compute_mask` returns `ids != 0` so the
    Transformer layers downstream ignore padded positions. Inputs may be shorter
    than `sequence_length` (positions `0..n-1` are used).

    Called with `reverse=True` on hidden states `(batch, n, embed_dim)`, the layer
    returns vocabulary logits `h @ E_token^T`: the tied output embedding of
    Press & Wolf (2017), which shares one matrix between input and output.

    Args:
        sequence_length: int. Longest sequence the learned position table covers.
        vocab_size: int. Number of token ids, padding (0) included.
        embed_dim: int. Size of each embedding vector.
        position: `"learned"` (default, as in the tutorial) or `"sine"`.
        mask_zero: bool. Whether id 0 is padding and produces a mask. Defaults to
            `True`.
        scale_token_embeddings: bool. Multiply token embeddings by
            `sqrt(embed_dim)` as in Vaswani et al. (section 3.4). Defaults to `False`
            (the tutorial does not).
        max_wavelength: int. Passed to `SinePositionEncoding` when
            `position="sine"`. Defaults to `10000`.

    Call arguments:
        inputs: int tensor `(batch, n)` of token ids, or with `reverse=True` a float
            tensor `(batch, n, embed_dim)`.
        start_index: position of the first token (incremental decoding). Default 0.
        reverse: bool. Return vocabulary logits from hidden states. Default False.

    Example:
    >>> layer = PositionalEmbedding(sequence_length=20, vocab_size=100, embed_dim=8)
    >>> ids = keras.ops.array([[5, 7, 0, 0]])
    >>> tuple(layer(ids).shape)
    (1, 4, 8)
    >>> keras.ops.convert_to_numpy(layer.compute_mask(ids)).tolist()
    [[True, True, False, False]]

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Press and Wolf, 2017](https://arxiv.org/abs/1608.05859)
    """

    def __init__(
        self,
        sequence_length,
        vocab_size,
        embed_dim,
        position="learned",
        mask_zero=True,
        scale_token_embeddings=False,
        max_wavelength=10000,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if position not in POSITION_KINDS:
            raise ValueError(f"`position` must be one of {POSITION_KINDS}, got {position!r}.")
        require_positive_ints(
            sequence_length=sequence_length, vocab_size=vocab_size, embed_dim=embed_dim
        )
        self.sequence_length = sequence_length
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.position = position
        self.mask_zero = mask_zero
        self.scale_token_embeddings = scale_token_embeddings
        self.max_wavelength = max_wavelength

    def build(self, input_shape):
        self.token_embedding = keras.layers.Embedding(
            self.vocab_size, self.embed_dim, dtype=self.dtype_policy, name="token_embedding"
        )
        self.token_embedding.build((None, None))
        if self.position == "learned":
            self.position_embedding = keras.layers.Embedding(
                self.sequence_length,
                self.embed_dim,
                dtype=self.dtype_policy,
                name="position_embedding",
            )
            self.position_embedding.build((None,))
        else:
            self.position_embedding = SinePositionEncoding(
                self.max_wavelength, dtype=self.dtype_policy, name="position_embedding"
            )
        self.built = True

    def call(self, inputs, start_index=0, reverse=False):
        if reverse:
            embeddings = ops.cast(self.token_embedding.embeddings, self.compute_dtype)
            return ops.matmul(inputs, ops.transpose(embeddings))
        length = inputs.shape[-1]
        if self.position == "learned" and isinstance(length, int):
            if length > self.sequence_length:
                raise ValueError(
                    f"Got a sequence of {length} tokens but this PositionalEmbedding "
                    f"has learned positions for {self.sequence_length}; truncate the "
                    "inputs or build the layer with a larger `sequence_length`."
                )
        tokens = self.token_embedding(inputs)
        if self.scale_token_embeddings:
            tokens = tokens * ops.cast(math.sqrt(self.embed_dim), tokens.dtype)
        if self.position == "learned":
            positions = ops.arange(ops.shape(inputs)[-1]) + start_index
            return tokens + self.position_embedding(positions)
        return tokens + self.position_embedding(tokens, start_index=start_index)

    def compute_output_spec(self, inputs, start_index=0, reverse=False):
        # Declared, not traced: backends that trace `call` with a stand-in length for
        # unknown dimensions (PyTorch) would trip the learned-length check.
        size = self.vocab_size if reverse else self.embed_dim
        return keras.KerasTensor((*inputs.shape[:-1], size) if reverse
                                 else (*inputs.shape, size), dtype=self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        if "float" in str(inputs.dtype):
            return mask  # reverse=True: logits keep the mask of the hidden states
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "vocab_size": self.vocab_size,
                "embed_dim": self.embed_dim,
                "position": self.position,
                "mask_zero": self.mask_zero,
                "scale_token_embeddings": self.scale_token_embeddings,
                "max_wavelength": self.max_wavelength,
            }
        )
        return config
