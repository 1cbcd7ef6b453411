"""Transformer encoder block (Vaswani et al., 2017)."""

import keras

from layers.attention_utils import padding_attention_mask, residual_block, without_keras_mask
from layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="nlpkit")
class TransformerEncoder(TransformerBlock):
    """One Transformer encoder block: self-attention, then a position-wise FFN.

    Follows section 3.1 of *Attention Is All You Need*. Each of the two sublayers is
    wrapped in a residual connection and layer normalization:
    post-LN (the paper and the tutorial, default) computes `LN(x + Sublayer(x))`;
    pre-LN (`norm_first=True`, Xiong et al. 2020) computes `x + Sublayer(LN(x))`,
    which trains more stably in deep stacks (add a final `LayerNormalization` after
    the last pre-LN block). The FFN is `max(0, x W1 + b1) W2 + b2` with inner size
    `dense_dim`.

    Each of the `num_heads` heads projects to `key_dim = embed_dim // num_heads`
    features by default, as in the paper, so all heads together cost as much as one
    full-width head. The tutorial used `key_dim=embed_dim` (pass it explicitly to
    reproduce it): with 8 heads that is 8x the attention projection compute and
    weights.

    Masking: the padding mask of the input (from `PositionalEmbedding`, or passed as
    `mask`) stops every position from attending to padded keys; the output carries
    the same mask.

    Args:
        embed_dim: int. Feature size of inputs and outputs (`d_model`).
        dense_dim: int. Inner size of the feed-forward network (`d_ff`).
        num_heads: int. Number of attention heads.
        dropout: float. Dropout on attention weights and on each sublayer output.
            Defaults to `0.0`.
        norm_first: bool. Pre-LN if `True`, post-LN (default) if `False`.
        key_dim: int or None. Per-head query/key size. Defaults to
            `embed_dim // num_heads`.
        activation: str or callable. FFN activation. Defaults to `"relu"`.
        layer_norm_epsilon: float. Defaults to `1e-5`.

    Example:
    >>> encoder = TransformerEncoder(embed_dim=32, dense_dim=64, num_heads=4)
    >>> tuple(encoder(keras.ops.ones((2, 10, 32))).shape)
    (2, 10, 32)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Xiong et al., 2020](https://arxiv.org/abs/2002.04745)
    """

    def build(self, input_shape):
        self._check_feature_size(input_shape)
        self.self_attention = self._attention("self_attention", input_shape, input_shape)
        self.self_attention_norm = self._layer_norm("self_attention_norm", input_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.feedforward = self._feedforward(input_shape)
        self.feedforward_norm = self._layer_norm("feedforward_norm", input_shape)
        self.feedforward_dropout = self._dropout("feedforward_dropout")
        self.built = True

    def call(self, inputs, mask=None, training=None):
        attention_mask = padding_attention_mask(mask)
        x = residual_block(
            without_keras_mask(inputs),
            lambda y: self.self_attention(y, y, attention_mask=attention_mask, training=training),
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            training,
        )
        return residual_block(
            x, self.feedforward, self.feedforward_norm, self.feedforward_dropout,
            self.norm_first, training,
        )

    def compute_output_shape(self, input_shape):
        return input_shape
