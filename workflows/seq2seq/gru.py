"""The GRU translator (the tutorial's sequence-to-sequence RNN, optionally with additive
attention): one model family of the translation lesson, built from `layers/`.

It offers the same cached steps as the Transformer (`initial_cache`, `call_with_cache`),
so one decoder serves both. `build(config, ...)` makes one from a `TranslationConfig`
(`seq2seq/presets.py`).
"""

import keras
from keras import ops

from data_prep.text import PAD_ID
from layers import GRUSeq2SeqDecoder, GRUSeq2SeqEncoder


@keras.saving.register_keras_serializable(package="nlpkit")
class GRUTranslator(keras.Model):
    """The tutorial's RNN translator: bidirectional GRU encoder, GRU decoder, optionally
    with additive attention (Bahdanau et al., 2015).

    Args:
        source_vocabulary_size, target_vocabulary_size: int.
        embed_dim, latent_dim: int. Embedding and GRU sizes.
        attention: bool. Additive attention over the encoder outputs.
        output_dropout: float. Before the output layer.
        dtype: dtype policy of every sublayer.
    """

    def __init__(self, source_vocabulary_size, target_vocabulary_size, embed_dim=256,
                 latent_dim=1024, attention=False, output_dropout=0.5, dtype=None, **kwargs):
        encoder = GRUSeq2SeqEncoder(source_vocabulary_size, embed_dim, latent_dim, dtype=dtype,
                                    name="encoder")
        decoder = GRUSeq2SeqDecoder(target_vocabulary_size, embed_dim, latent_dim,
                                    attention=attention, dropout=output_dropout, dtype=dtype,
                                    name="decoder")
        source = keras.Input((None,), dtype="int32", name="source")
        target = keras.Input((None,), dtype="int32", name="target")
        sequence, state = encoder(source)
        logits = decoder(target, state, sequence)
        kwargs.setdefault("name", "gru_seq2seq")
        super().__init__({"source": source, "target": target}, logits, **kwargs)
        self.encoder, self.decoder = encoder, decoder
        self.source_vocabulary_size = source_vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
        self.embed_dim, self.latent_dim = embed_dim, latent_dim
        self.attention, self.output_dropout = attention, output_dropout
        self.sublayer_dtype = encoder.dtype_policy

    def initial_cache(self, source, max_length):
        """The encoder's outputs and final state: all the GRU decoder carries."""
        sequence, state = self.encoder(source)
        return state, sequence, ops.not_equal(source, PAD_ID)

    def call_with_cache(self, token, cache, index):
        state, sequence, source_mask = cache
        logits, state = self.decoder(token, state, sequence, encoder_sequence_mask=source_mask,
                                     return_state=True)
        return ops.cast(logits, "float32")[:, 0, :], (state, sequence, source_mask)

    def attention_weights(self, source, target):
        """Additive attention weights `(target, source)` for the first sentence (zeros
        without attention)."""
        if not self.attention:
            return ops.zeros((ops.shape(target)[1], ops.shape(source)[1]))
        sequence, state = self.encoder(source)
        hidden, _ = self.decoder.gru(self.decoder.embedding(target), initial_state=state)
        _, weights = self.decoder.attention_layer(hidden, sequence, return_attention_scores=True)
        return weights[0]

    def get_config(self):
        return {"name": self.name, "dtype": keras.dtype_policies.serialize(self.sublayer_dtype),
                "source_vocabulary_size": self.source_vocabulary_size,
                "target_vocabulary_size": self.target_vocabulary_size,
                "embed_dim": self.embed_dim, "latent_dim": self.latent_dim,
                "attention": self.attention, "output_dropout": self.output_dropout}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def build(config, source_vocabulary_size, target_vocabulary_size):
    """The GRU translator a config describes."""
    return GRUTranslator(source_vocabulary_size, target_vocabulary_size, config.embed_dim,
                         config.latent_dim, config.attention, config.output_dropout)
