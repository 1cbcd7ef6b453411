"""Configuration and sublayer factories shared by the Transformer encoder and decoder."""

import keras
import keras_hub

from layers.validation import require_positive_ints


class TransformerBlock(keras.layers.Layer):
    """Base class: validates and stores the block's sizes, builds its sublayers.

    Not registered or exported: use `TransformerEncoder` or `TransformerDecoder`.
    """

    def __init__(
        self,
        embed_dim,
        dense_dim,
        num_heads,
        dropout=0.0,
        norm_first=False,
        key_dim=None,
        activation="relu",
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        require_positive_ints(embed_dim=embed_dim, dense_dim=dense_dim, num_heads=num_heads)
        if key_dim is None and embed_dim % num_heads:
            raise ValueError(
                f"`embed_dim` ({embed_dim}) must be divisible by `num_heads` ({num_heads}) "
                "for the default `key_dim = embed_dim // num_heads`; change one of them "
                "or pass `key_dim` explicitly."
            )
        if key_dim is not None and (not isinstance(key_dim, int) or key_dim <= 0):
            raise ValueError(f"`key_dim` must be a positive int or None, got {key_dim!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        self.embed_dim = embed_dim
        self.dense_dim = dense_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.norm_first = norm_first
        self.key_dim = key_dim
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    @property
    def head_dim(self):
        """Per-head query/key/value size: `key_dim`, or `embed_dim // num_heads`."""
        return self.key_dim or self.embed_dim // self.num_heads

    def _check_feature_size(self, shape):
        if shape[-1] is not None and shape[-1] != self.embed_dim:
            raise ValueError(
                f"{type(self).__name__} was built with embed_dim={self.embed_dim} but "
                f"received inputs with {shape[-1]} features (shape {tuple(shape)}); "
                "they must match."
            )

    def _attention(self, name, query_shape, value_shape):
        attention = keras_hub.layers.CachedMultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self.head_dim,
            dropout=self.dropout,
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape, value_shape)
        return attention

    def _layer_norm(self, name, input_shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(input_shape)
        return norm

    def _dropout(self, name):
        return keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _feedforward(self, input_shape):
        """The position-wise FFN `max(0, x W1 + b1) W2 + b2`, inner size `dense_dim`."""
        feedforward = keras.Sequential(
            [
                keras.layers.Dense(self.dense_dim, activation=self.activation,
                                   dtype=self.dtype_policy, name="feedforward_intermediate"),
                keras.layers.Dense(self.embed_dim, dtype=self.dtype_policy,
                                   name="feedforward_output"),
            ],
            name="feedforward",
        )
        feedforward.build(input_shape)
        return feedforward

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embed_dim": self.embed_dim,
                "dense_dim": self.dense_dim,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "norm_first": self.norm_first,
                "key_dim": self.key_dim,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
