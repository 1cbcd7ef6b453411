"""Fixed sinusoidal position encoding (Vaswani et al., 2017)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="nlpkit")
class SinePositionEncoding(keras.layers.Layer):
    """Fixed sinusoidal position encoding, with no trainable weights.

    Implements section 3.5 of *Attention Is All You Need*: for position `pos` and
    feature `i`, `PE[pos, 2k] = sin(pos / w**(2k/d))` and
    `PE[pos, 2k+1] = cos(pos / w**(2k/d))`, with `w = max_wavelength` and `d` the
    feature size. Sines and cosines are interleaved, as in
    `keras_hub.layers.SinePositionEncoding`, so the two give identical outputs.
    Because the encoding is a formula, it works for sequences of any length.

    The layer returns the encoding only (shaped like its input); add it to the token
    embeddings yourself, or use `PositionalEmbedding(..., position="sine")`.

    Args:
        max_wavelength: int. The longest wavelength of the sinusoids, `w` above.
            Defaults to `10000`, the paper's value.

    Call arguments:
        inputs: float tensor `(batch, sequence_length, feature_size)`.
        start_index: int or int tensor, the position of the first timestep
            (non-zero during incremental decoding). Defaults to `0`.

    Example:
    >>> tokens = keras.ops.ones((2, 10, 16))
    >>> tuple((tokens + SinePositionEncoding()(tokens)).shape)
    (2, 10, 16)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(f"`max_wavelength` must be positive, got {max_wavelength}.")
        self.max_wavelength = max_wavelength
        self.supports_masking = True
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        sequence_length, feature_size = shape[-2], shape[-1]
        positions = ops.cast(ops.arange(sequence_length) + start_index, self.compute_dtype)
        features = ops.arange(feature_size)
        exponents = ops.cast(2 * (features // 2), self.compute_dtype) / ops.cast(
            feature_size, self.compute_dtype
        )
        inverse_timescales = ops.exp(-math.log(self.max_wavelength) * exponents)
        angles = ops.expand_dims(positions, -1) * ops.expand_dims(inverse_timescales, 0)
        is_odd = ops.expand_dims(features % 2 == 1, 0)
        encoding = ops.where(is_odd, ops.cos(angles), ops.sin(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
