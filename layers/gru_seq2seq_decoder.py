"""GRU decoder of the tutorial's RNN translator, with optional Bahdanau attention."""

import keras
from keras import ops

from layers.bahdanau_attention import BahdanauAttention
from layers.validation import require_positive_ints


@keras.saving.register_keras_serializable(package="nlpkit")
class GRUSeq2SeqDecoder(keras.layers.Layer):
    """Predicts the next target token from the previous ones and the source summary.

    The tutorial's decoder: `Embedding(mask_zero=True) -> GRU(latent_dim,
    return_sequences=True)` started from the encoder's final state, then
    `Dropout -> Dense(vocab_size)`. Trained with teacher forcing: the input is the
    target shifted right (`[start] ...`), the labels the target shifted left.

    With `attention=True` each GRU output `h_t` also reads the encoder outputs
    through `BahdanauAttention`: context `c_t` from additive scores, then
    `tanh(W [h_t; c_t])` (the attentional state of Luong et al., 2015). Attention
    is applied after the GRU, so teacher-forced training stays parallel over time.

    Incremental decoding: call with the newest token(s), `initial_state=` the state
    from the previous call and `return_state=True`.

    Masking: target padding (id 0) is skipped by the GRU; source padding is hidden
    from attention (`encoder_sequence_mask`, filled from the encoder's mask).

    Args:
        vocab_size: int. Number of target token ids (0 = padding).
        embed_dim: int. Size of the token embeddings.
        latent_dim: int. GRU state size; must equal the encoder's.
        attention: bool. Use Bahdanau attention over `encoder_sequence`.
            Defaults to `False` (the tutorial's model).
        attention_units: int or None. Hidden size of the attention MLP. Defaults
            to `latent_dim`.
        dropout: float. Dropout before the output layer. Defaults to `0.5`.

    Call arguments:
        target_tokens: int tensor `(batch, T)`.
        initial_state: float tensor `(batch, latent_dim)`, the encoder state (or the
            state returned by the previous step).
        encoder_sequence: float tensor `(batch, S, latent_dim)`; needed with
            attention.
        encoder_sequence_mask: bool tensor `(batch, S)`.
        return_state: bool. Also return the final GRU state. Defaults to False.

    Returns:
        Next-token logits `(batch, T, vocab_size)` in float32 (and the state).

    Example:
    >>> decoder = GRUSeq2SeqDecoder(vocab_size=50, embed_dim=8, latent_dim=16)
    >>> tuple(decoder(keras.ops.array([[1, 7, 3]]), keras.ops.zeros((1, 16))).shape)
    (1, 3, 50)

    References:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(self, vocab_size, embed_dim, latent_dim, attention=False,
                 attention_units=None, dropout=0.5, **kwargs):
        super().__init__(**kwargs)
        require_positive_ints(vocab_size=vocab_size, embed_dim=embed_dim, latent_dim=latent_dim)
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.latent_dim = latent_dim
        self.attention = attention
        self.attention_units = attention_units
        self.dropout = dropout

    def build(self, target_tokens_shape, initial_state_shape=None, encoder_sequence_shape=None):
        batch_time = tuple(target_tokens_shape)
        self.embedding = keras.layers.Embedding(
            self.vocab_size, self.embed_dim, dtype=self.dtype_policy, name="embedding"
        )
        self.embedding.build(batch_time)
        self.gru = keras.layers.GRU(self.latent_dim, return_sequences=True, return_state=True,
                                    dtype=self.dtype_policy, name="gru")
        self.gru.build((*batch_time, self.embed_dim))
        hidden_shape = (*batch_time, self.latent_dim)
        if self.attention:
            source_shape = encoder_sequence_shape or (batch_time[0], None, self.latent_dim)
            self.attention_layer = BahdanauAttention(
                self.attention_units or self.latent_dim, dtype=self.dtype_policy, name="attention"
            )
            self.attention_layer.build(hidden_shape, source_shape)
            self.attentional_projection = keras.layers.Dense(
                self.latent_dim, activation="tanh", dtype=self.dtype_policy,
                name="attentional_projection",
            )
            self.attentional_projection.build((*batch_time, self.latent_dim + source_shape[-1]))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_layer = keras.layers.Dense(self.vocab_size, dtype=self.dtype_policy,
                                               name="output")
        self.output_layer.build(hidden_shape)
        self.built = True

    def call(self, target_tokens, initial_state, encoder_sequence=None,
             encoder_sequence_mask=None, return_state=False, training=None):
        if self.attention and encoder_sequence is None:
            raise ValueError("This decoder uses attention: pass `encoder_sequence`.")
        mask = ops.not_equal(target_tokens, 0)
        hidden, state = self.gru(
            self.embedding(target_tokens), initial_state=initial_state, mask=mask,
            training=training,
        )
        if self.attention:
            context = self.attention_layer(hidden, encoder_sequence,
                                           value_mask=encoder_sequence_mask)
            hidden = self.attentional_projection(ops.concatenate([hidden, context], axis=-1))
        logits = ops.cast(self.output_layer(self.dropout_layer(hidden, training=training)),
                          "float32")
        return (logits, state) if return_state else logits

    def compute_mask(self, target_tokens, mask=None):
        return ops.not_equal(target_tokens, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "embed_dim": self.embed_dim,
                "latent_dim": self.latent_dim,
                "attention": self.attention,
                "attention_units": self.attention_units,
                "dropout": self.dropout,
            }
        )
        return config
