"""Additive attention of Bahdanau et al. (2015)."""

import keras
from keras import ops

from layers.validation import require_positive_ints


@keras.saving.register_keras_serializable(package="nlpkit")
class BahdanauAttention(keras.layers.Layer):
    """Additive (Bahdanau) attention: a small MLP scores each query-key pair.

    For query `q_t` and key `k_s` the score is `e_ts = v^T tanh(W_q q_t + W_k k_s)`
    (Bahdanau et al., 2015, eq. 6 and appendix A.1.2); the weights are
    `a_t = softmax_s(e_t)` and the context is `c_t = sum_s a_ts v_s`. Unlike
    `keras.layers.AdditiveAttention`, the query and key are projected by learned
    matrices `W_q`, `W_k` to `units` features first, so they may differ in size.

    Masking: padded keys (`value_mask` False, filled from the value's Keras mask)
    get zero weight. The output keeps the query's mask. Scores and softmax are
    computed in float32 for stability under mixed precision.

    Args:
        units: int. Size of the hidden layer of the scoring MLP.

    Call arguments:
        query: float tensor `(batch, T, query_dim)`.
        value: float tensor `(batch, S, value_dim)`, the encoder outputs.
        key: float tensor `(batch, S, key_dim)`. Defaults to `value`.
        value_mask: bool tensor `(batch, S)`, True at real source tokens.
        return_attention_scores: bool. Also return the weights `(batch, T, S)`.

    Returns:
        The context `(batch, T, value_dim)`, and the weights if requested.

    Example:
    >>> attention = BahdanauAttention(units=16)
    >>> decoder_states, encoder_outputs = keras.ops.ones((2, 5, 8)), keras.ops.ones((2, 7, 12))
    >>> tuple(attention(decoder_states, encoder_outputs).shape)
    (2, 5, 12)

    References:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
    """

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        require_positive_ints(units=units)
        self.units = units
        self.supports_masking = True

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = key_shape or value_shape
        self.query_projection = keras.layers.Dense(
            self.units, use_bias=False, dtype=self.dtype_policy, name="query_projection"
        )
        self.query_projection.build(query_shape)
        self.key_projection = keras.layers.Dense(
            self.units, dtype=self.dtype_policy, name="key_projection"
        )
        self.key_projection.build(key_shape)
        self.score_vector = keras.layers.Dense(
            1, use_bias=False, dtype=self.dtype_policy, name="score_vector"
        )
        self.score_vector.build((*query_shape[:-1], self.units))
        self.built = True

    def call(self, query, value, key=None, value_mask=None, return_attention_scores=False):
        key = value if key is None else key
        projected_query = ops.expand_dims(self.query_projection(query), 2)  # (B, T, 1, U)
        projected_key = ops.expand_dims(self.key_projection(key), 1)  # (B, 1, S, U)
        scores = ops.squeeze(self.score_vector(ops.tanh(projected_query + projected_key)), -1)
        scores = ops.cast(scores, "float32")
        if value_mask is not None:
            keep = ops.expand_dims(ops.cast(value_mask, "bool"), 1)
            scores = ops.where(keep, scores, -1e9)
        weights = ops.softmax(scores, axis=-1)
        context = ops.matmul(ops.cast(weights, value.dtype), value)
        if return_attention_scores:
            return context, weights
        return context

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return (*query_shape[:-1], value_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config
