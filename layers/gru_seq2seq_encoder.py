"""GRU encoder of the tutorial's RNN sequence-to-sequence translator."""

import keras
from keras import ops

from layers.validation import require_positive_ints


@keras.saving.register_keras_serializable(package="nlpkit")
class GRUSeq2SeqEncoder(keras.layers.Layer):
    """Embeds source token ids and reads them with a (bidirectional) GRU.

    The tutorial's encoder: `Embedding(mask_zero=True) ->
    Bidirectional(GRU(latent_dim), merge_mode="sum")`. The summed final states of
    the two directions are the sentence summary that initializes the decoder
    (Sutskever et al., 2014; Cho et al., 2014). The per-token outputs are returned
    too, for a decoder with attention (Bahdanau et al., 2015).

    Masking: token id 0 is padding and is skipped by the GRU; the returned
    sequence carries the source padding mask, so `GRUSeq2SeqDecoder` and
    `BahdanauAttention` ignore padded positions.

    Args:
        vocab_size: int. Number of source token ids (0 = padding).
        embed_dim: int. Size of the token embeddings.
        latent_dim: int. GRU state size.
        bidirectional: bool. Read the sentence both ways and sum. Defaults to True.

    Returns:
        `(sequence, state)`: `(batch, S, latent_dim)` outputs and the
        `(batch, latent_dim)` final state.

    Example:
    >>> encoder = GRUSeq2SeqEncoder(vocab_size=100, embed_dim=8, latent_dim=16)
    >>> sequence, state = encoder(keras.ops.array([[4, 9, 2, 0]]))
    >>> tuple(sequence.shape), tuple(state.shape)
    ((1, 4, 16), (1, 16))

    References:
        - [Sutskever et al., 2014](https://arxiv.org/abs/1409.3215)
        - [Cho et al., 2014](https://arxiv.org/abs/1406.1078)
    """

    def __init__(self, vocab_size, embed_dim, latent_dim, bidirectional=True, **kwargs):
        super().__init__(**kwargs)
        require_positive_ints(vocab_size=vocab_size, embed_dim=embed_dim, latent_dim=latent_dim)
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.latent_dim = latent_dim
        self.bidirectional = bidirectional

    def build(self, input_shape):
        self.embedding = keras.layers.Embedding(
            self.vocab_size, self.embed_dim, dtype=self.dtype_policy, name="embedding"
        )
        self.embedding.build(input_shape)
        gru = keras.layers.GRU(self.latent_dim, return_sequences=True, return_state=True,
                               dtype=self.dtype_policy, name="gru")
        if self.bidirectional:
            gru = keras.layers.Bidirectional(gru, merge_mode="sum", dtype=self.dtype_policy,
                                             name="bidirectional_gru")
        gru.build((*input_shape, self.embed_dim))
        self.gru = gru
        self.built = True

    def call(self, inputs, training=None):
        mask = ops.not_equal(inputs, 0)
        outputs = self.gru(self.embedding(inputs), mask=mask, training=training)
        if self.bidirectional:
            sequence, forward_state, backward_state = outputs
            return sequence, forward_state + backward_state
        return tuple(outputs)

    def compute_mask(self, inputs, mask=None):
        return [ops.not_equal(inputs, 0), None]

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.latent_dim), (input_shape[0], self.latent_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "embed_dim": self.embed_dim,
                "latent_dim": self.latent_dim,
                "bidirectional": self.bidirectional,
            }
        )
        return config
