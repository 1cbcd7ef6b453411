"""Transformer decoder block with cached incremental decoding (Vaswani et al., 2017)."""

import keras
from keras import ops

from layers.attention_utils import (
    causal_attention_mask,
    merge_masks,
    padding_attention_mask,
    residual_block,
    without_keras_mask,
)
from layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="nlpkit")
class TransformerDecoder(TransformerBlock):
    """One Transformer decoder block: causal self-attention, cross-attention, FFN.

    Follows section 3.1 of *Attention Is All You Need*. Masked (causal)
    self-attention lets target position `i` attend only to positions `<= i`;
    cross-attention lets every target position attend to the encoder outputs
    (`encoder_sequence`); a position-wise FFN follows. Each sublayer has a residual
    connection and layer norm, post-LN by default or pre-LN with `norm_first=True`.
    Without `encoder_sequence` the layer is a decoder-only (GPT-style) block.

    Masking: called as `decoder(target_embeddings, encoder_outputs)` in a Keras
    model, both padding masks arrive by themselves (Keras fills
    `decoder_sequence_mask` and `encoder_sequence_mask` from the inputs' masks);
    they can also be passed explicitly. Target padding is hidden from
    self-attention keys, source padding from cross-attention keys. The output
    carries the target mask.

    Cached incremental decoding: generating token `t` with the tutorial's loop
    re-runs all `t` previous tokens through every sublayer. Instead, pass
    `self_attention_cache` (from `initial_cache`) and `cache_update_index=t` with
    just the newest token(s): the layer projects only the new tokens, writes their
    keys/values into the cache at index `t` and attends over the cache, so each step
    projects and transforms one token instead of `t`. Encoder keys/values are
    computed once with `cross_attention_cache(encoder_outputs)`. Returns
    `(outputs, updated_self_attention_cache)`. The cache has a fixed length, so the
    loop compiles (XLA, `keras_hub.samplers`); its outputs equal the full forward
    pass at every position.

    Args:
        embed_dim: int. Feature size of inputs and outputs (`d_model`).
        dense_dim: int. Inner size of the feed-forward network.
        num_heads: int. Number of attention heads.
        dropout: float. Dropout on attention weights and sublayer outputs.
            Defaults to `0.0`.
        norm_first: bool. Pre-LN if `True`, post-LN (default) if `False`.
        key_dim: int or None. Per-head query/key size. Defaults to
            `embed_dim // num_heads` (the tutorial's `key_dim=embed_dim` costs
            `num_heads` times more).
        activation: str or callable. FFN activation. Defaults to `"relu"`.
        layer_norm_epsilon: float. Defaults to `1e-5`.

    Call arguments:
        decoder_sequence: float tensor `(batch, T, embed_dim)`.
        encoder_sequence: float tensor `(batch, S, embed_dim)` or None.
        decoder_sequence_mask, encoder_sequence_mask: bool tensors `(batch, T)` and
            `(batch, S)`, True at real tokens. Filled from Keras masks if omitted.
            With a cache the target mask is ignored (generated tokens are real).
        self_attention_cache: float tensor `(batch, 2, max_length, num_heads,
            head_dim)` of keys and values, or None.
        cache_update_index: int or int tensor, position of `decoder_sequence[:, 0]`
            in the cache. Required with `self_attention_cache`.
        cross_attention_cache: float tensor `(batch, 2, S, num_heads, head_dim)`
            from `cross_attention_cache()`; replaces `encoder_sequence`.
        use_causal_mask: bool. Defaults to `True`.
        return_attention_scores: bool. Also return the cross-attention weights
            `(batch, num_heads, T, S)` (for attention heatmaps). Defaults to False.

    Returns:
        `outputs`, then `self_attention_cache` if one was passed, then the
        cross-attention scores if requested (a tuple if more than one).

    Example:
    >>> decoder = TransformerDecoder(embed_dim=32, dense_dim=64, num_heads=4)
    >>> target, source = keras.ops.ones((2, 7, 32)), keras.ops.ones((2, 9, 32))
    >>> tuple(decoder(target, source).shape)
    (2, 7, 32)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Xiong et al., 2020](https://arxiv.org/abs/2002.04745)
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        self._check_feature_size(decoder_sequence_shape)
        self.self_attention = self._attention(
            "self_attention", decoder_sequence_shape, decoder_sequence_shape
        )
        self.self_attention_norm = self._layer_norm("self_attention_norm", decoder_sequence_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            self.cross_attention = self._attention(
                "cross_attention", decoder_sequence_shape, encoder_sequence_shape
            )
            self.cross_attention_norm = self._layer_norm(
                "cross_attention_norm", decoder_sequence_shape
            )
            self.cross_attention_dropout = self._dropout("cross_attention_dropout")
        self.feedforward = self._feedforward(decoder_sequence_shape)
        self.feedforward_norm = self._layer_norm("feedforward_norm", decoder_sequence_shape)
        self.feedforward_dropout = self._dropout("feedforward_dropout")
        self.built = True

    def initial_cache(self, batch_size, max_length):
        """An all-zero self-attention cache for decoding up to `max_length` tokens."""
        shape = (batch_size, 2, max_length, self.num_heads, self.head_dim)
        return ops.zeros(shape, dtype=self.compute_dtype)

    def cross_attention_cache(self, encoder_sequence):
        """Projects the encoder outputs to cross-attention keys and values, once."""
        if self.cross_attention is None:
            raise ValueError("This decoder was built without cross-attention.")
        encoder_sequence = without_keras_mask(encoder_sequence)
        keys = self.cross_attention._key_dense(encoder_sequence)
        values = self.cross_attention._value_dense(encoder_sequence)
        return ops.stack([keys, values], axis=1)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_sequence_mask=None,
        encoder_sequence_mask=None,
        self_attention_cache=None,
        cache_update_index=None,
        cross_attention_cache=None,
        use_causal_mask=True,
        return_attention_scores=False,
        training=None,
    ):
        self._check_call(encoder_sequence, self_attention_cache, cache_update_index,
                         cross_attention_cache)
        decoder_sequence = without_keras_mask(decoder_sequence)
        encoder_sequence = without_keras_mask(encoder_sequence)
        self_attention_mask = self._self_attention_mask(
            decoder_sequence, decoder_sequence_mask, self_attention_cache,
            cache_update_index, use_causal_mask,
        )

        def attend_to_target(x):
            return self.self_attention(
                x, x, attention_mask=self_attention_mask, cache=self_attention_cache,
                cache_update_index=cache_update_index, training=training,
            )

        x = residual_block(
            decoder_sequence, attend_to_target, self.self_attention_norm,
            self.self_attention_dropout, self.norm_first, training,
        )
        if self_attention_cache is not None:
            x, self_attention_cache = x

        scores = None
        if self.cross_attention is not None:
            source_mask = padding_attention_mask(encoder_sequence_mask)

            def attend_to_source(x):
                source = encoder_sequence if encoder_sequence is not None else x
                return self.cross_attention(
                    x, source, attention_mask=source_mask, cache=cross_attention_cache,
                    return_attention_scores=return_attention_scores, training=training,
                )

            x = residual_block(
                x, attend_to_source, self.cross_attention_norm,
                self.cross_attention_dropout, self.norm_first, training,
            )
            if isinstance(x, tuple):  # (outputs, scores[, static cache])
                x, scores = x[0], (x[1] if return_attention_scores else None)

        x = residual_block(
            x, self.feedforward, self.feedforward_norm, self.feedforward_dropout,
            self.norm_first, training,
        )
        outputs = (x,)
        if self_attention_cache is not None:
            outputs += (self_attention_cache,)
        if return_attention_scores:
            outputs += (scores,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _check_call(self, encoder_sequence, self_attention_cache, cache_update_index,
                    cross_attention_cache):
        has_source = encoder_sequence is not None or cross_attention_cache is not None
        if self.cross_attention is None and has_source:
            raise ValueError(
                "This TransformerDecoder was built without cross-attention (first "
                "called with no encoder_sequence); it cannot take one now."
            )
        if self.cross_attention is not None and not has_source:
            raise ValueError(
                "This TransformerDecoder has cross-attention: pass `encoder_sequence` "
                "(or a `cross_attention_cache`)."
            )
        if (self_attention_cache is None) != (cache_update_index is None):
            raise ValueError(
                "Pass `self_attention_cache` and `cache_update_index` together (for "
                "incremental decoding), or neither."
            )

    @staticmethod
    def _self_attention_mask(decoder_sequence, decoder_sequence_mask, self_attention_cache,
                             cache_update_index, use_causal_mask):
        query_length = ops.shape(decoder_sequence)[1]
        if self_attention_cache is not None:
            # Cache slots after the current tokens are still empty: always causal.
            key_length = ops.shape(self_attention_cache)[2]
            return causal_attention_mask(query_length, key_length, cache_update_index)
        padding_mask = padding_attention_mask(decoder_sequence_mask)
        if not use_causal_mask:
            return padding_mask
        return merge_masks(padding_mask, causal_attention_mask(query_length, query_length))
