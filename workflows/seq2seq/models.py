"""Translators built from `layers/`, with typed sublayers and cached one-token steps.

Each model is a functional Keras model (`{"source": ids, "target": ids}` -> next-token
logits) that trains with `fit` and saves as a `.keras` file. Like keras-hub's causal
LMs, it keeps typed references to its sublayers and offers what cached decoding
needs: `initial_cache(source, max_length)` runs the encoder once, and
`call_with_cache(token, cache, index)` returns the logits of the next token from the
newest one. Backend-agnostic (`keras.ops` only). Below them: the teacher-forcing
batches they train on (`PairBatches`) and `build_model`, a config's compiled model.
"""

import keras
import numpy as np
from keras import ops

import layers
from data_prep.text import EMPTY, BucketPlan, boundaries_every, pad_rows, take_rows
from layers import (
    GRUSeq2SeqDecoder,
    GRUSeq2SeqEncoder,
    PositionalEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from workflows.core.devices import BucketedBatches

PAD_ID = 0


def _translator_inputs():
    return (keras.Input((None,), dtype="int32", name="source"),
            keras.Input((None,), dtype="int32", name="target"))


@keras.saving.register_keras_serializable(package="nlpkit")
class TransformerTranslator(keras.Model):
    """Encoder-decoder Transformer (Vaswani et al., 2017), post-LN or pre-LN.

    The tutorial's model is one block each, `key_dim=embed_dim`, learned positions
    and `Dropout(0.5)` before the output layer. With `norm_first`, each stack ends with
    a LayerNormalization; with `tie_embeddings`, the output projection is the target
    embedding matrix transposed (Press & Wolf, 2017); with `share_embeddings` (one
    vocabulary for both languages), the source and target embeddings are one layer.

    Args:
        source_vocabulary_size, target_vocabulary_size: int.
        max_length: int. Longest source or target input, in tokens.
        embed_dim, dense_dim, num_heads: int. Block sizes.
        key_dim: int or None. Per-head size; None: `embed_dim // num_heads`.
        encoder_layers, decoder_layers: int. Number of blocks.
        dropout: float. Inside the blocks and after the embeddings.
        output_dropout: float. Before the output layer.
        norm_first: bool. Pre-LN blocks.
        position: `"learned"` or `"sine"`.
        tie_embeddings, scale_embeddings, share_embeddings: bool.
        dtype: dtype policy of every sublayer (the logits are always float32).
    """

    def __init__(self, source_vocabulary_size, target_vocabulary_size, max_length,
                 embed_dim=256, dense_dim=2048, num_heads=8, key_dim=None, encoder_layers=1,
                 decoder_layers=1, dropout=0.0, output_dropout=0.5, norm_first=False,
                 position="learned", tie_embeddings=False, scale_embeddings=False, dtype=None,
                 share_embeddings=False, **kwargs):
        if share_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError("share_embeddings needs one vocabulary for both languages, got "
                             f"sizes {source_vocabulary_size} and {target_vocabulary_size}.")

        # === Layers ===
        def embedding(name, vocabulary_size):
            return PositionalEmbedding(max_length, vocabulary_size, embed_dim, position=position,
                                       scale_token_embeddings=scale_embeddings, dtype=dtype,
                                       name=name)

        def norm(name):
            return keras.layers.LayerNormalization(epsilon=1e-5, dtype=dtype, name=name) \
                if norm_first else None

        block = {"embed_dim": embed_dim, "dense_dim": dense_dim, "num_heads": num_heads,
                 "key_dim": key_dim, "dropout": dropout, "norm_first": norm_first,
                 "dtype": dtype}
        target_embedding = embedding("target_embedding", target_vocabulary_size)
        source_embedding = target_embedding if share_embeddings else embedding(
            "source_embedding", source_vocabulary_size)
        encoder_blocks = [TransformerEncoder(**block, name=f"encoder_{index}")
                          for index in range(encoder_layers)]
        encoder_norm = norm("encoder_norm")
        decoder_blocks = [TransformerDecoder(**block, name=f"decoder_{index}")
                          for index in range(decoder_layers)]
        decoder_norm = norm("decoder_norm")
        output_projection = None if tie_embeddings else keras.layers.Dense(
            target_vocabulary_size, dtype="float32", name="logits")

        # === Functional model ===
        source, target = _translator_inputs()
        x = keras.layers.Dropout(dropout, dtype=dtype, name="source_dropout")(
            source_embedding(source))
        for encoder in encoder_blocks:
            x = encoder(x)
        if encoder_norm:
            x = encoder_norm(x)
        y = keras.layers.Dropout(dropout, dtype=dtype, name="target_dropout")(
            target_embedding(target))
        for decoder in decoder_blocks:
            y = decoder(y, x)
        if decoder_norm:
            y = decoder_norm(y)
        y = keras.layers.Dropout(output_dropout, dtype=dtype, name="output_dropout")(y)
        if tie_embeddings:
            logits = keras.layers.Activation("linear", dtype="float32", name="logits")(
                target_embedding(y, reverse=True))
        else:
            logits = output_projection(y)
        kwargs.setdefault("name", "transformer")
        super().__init__({"source": source, "target": target}, logits, **kwargs)

        # === Sublayers and config ===
        self.source_embedding, self.encoder_blocks = source_embedding, encoder_blocks
        self.encoder_norm, self.target_embedding = encoder_norm, target_embedding
        self.decoder_blocks, self.decoder_norm = decoder_blocks, decoder_norm
        self.output_projection = output_projection
        self.source_vocabulary_size = source_vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
        self.max_length, self.embed_dim, self.dense_dim = max_length, embed_dim, dense_dim
        self.num_heads, self.key_dim = num_heads, key_dim
        self.encoder_layers, self.decoder_layers = encoder_layers, decoder_layers
        self.dropout, self.output_dropout, self.norm_first = dropout, output_dropout, norm_first
        self.position, self.tie_embeddings = position, tie_embeddings
        self.scale_embeddings, self.share_embeddings = scale_embeddings, share_embeddings
        self.sublayer_dtype = source_embedding.dtype_policy

    def encode(self, source, source_mask):
        """The encoder stack's output for padded source ids."""
        x = self.source_embedding(source)
        for encoder in self.encoder_blocks:
            x = encoder(x, mask=source_mask)
        return self.encoder_norm(x) if self.encoder_norm else x

    def initial_cache(self, source, max_length):
        """Per decoder block: an empty self-attention cache and the projected encoder output."""
        source_mask = ops.not_equal(source, PAD_ID)
        encoded = self.encode(source, source_mask)
        batch = ops.shape(source)[0]
        return (tuple(d.initial_cache(batch, max_length) for d in self.decoder_blocks),
                tuple(d.cross_attention_cache(encoded) for d in self.decoder_blocks),
                source_mask)

    def call_with_cache(self, token, cache, index):
        """Float32 logits `(batch, vocabulary)` after `token` `(batch, 1)` at `index`."""
        self_caches, cross_caches, source_mask = cache
        x = self.target_embedding(token, start_index=index)
        updated = []
        for decoder, self_cache, cross_cache in zip(self.decoder_blocks, self_caches,
                                                    cross_caches, strict=True):
            x, self_cache = decoder(
                x, encoder_sequence_mask=source_mask, self_attention_cache=self_cache,
                cache_update_index=index, cross_attention_cache=cross_cache)
            updated.append(self_cache)
        if self.decoder_norm:
            x = self.decoder_norm(x)
        logits = self.output_projection(x) if self.output_projection \
            else self.target_embedding(x, reverse=True)
        return ops.cast(logits, "float32")[:, 0, :], (tuple(updated), cross_caches, source_mask)

    def attention_weights(self, source, target):
        """Cross-attention of the last decoder block, averaged over heads: `(target, source)`
        for the first sentence of the batch."""
        source_mask = ops.not_equal(source, PAD_ID)
        encoded = self.encode(source, source_mask)
        y = self.target_embedding(target)
        for decoder in self.decoder_blocks:
            y, scores = decoder(y, encoded, encoder_sequence_mask=source_mask,
                                return_attention_scores=True)
        return ops.mean(scores[0], axis=0)

    def get_config(self):
        return {"name": self.name, "dtype": keras.dtype_policies.serialize(self.sublayer_dtype),
                "source_vocabulary_size": self.source_vocabulary_size,
                "target_vocabulary_size": self.target_vocabulary_size,
                "max_length": self.max_length, "embed_dim": self.embed_dim,
                "dense_dim": self.dense_dim, "num_heads": self.num_heads,
                "key_dim": self.key_dim, "encoder_layers": self.encoder_layers,
                "decoder_layers": self.decoder_layers, "dropout": self.dropout,
                "output_dropout": self.output_dropout, "norm_first": self.norm_first,
                "position": self.position, "tie_embeddings": self.tie_embeddings,
                "scale_embeddings": self.scale_embeddings,
                "share_embeddings": self.share_embeddings}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


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
        source, target = _translator_inputs()
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


def build_translator(config, source_vocabulary_size, target_vocabulary_size):
    """The translator a lesson config describes (its field names are the arguments')."""
    if config.model == "gru_seq2seq":
        return GRUTranslator(source_vocabulary_size, target_vocabulary_size, config.embed_dim,
                             config.latent_dim, config.attention, config.output_dropout)
    return TransformerTranslator(
        source_vocabulary_size, target_vocabulary_size, config.sequence_length,
        config.embed_dim, config.dense_dim, config.num_heads, config.key_dim,
        config.encoder_layers, config.decoder_layers, config.dropout, config.output_dropout,
        config.norm_first, config.position, config.tie_embeddings, config.scale_embeddings,
        share_embeddings=config.share_embeddings)


# ## Teacher-forcing batches of token id pairs in a few fixed shapes, for any backend

def truncate(rows, max_length, keep_last=False):
    """Rows cut to `max_length` ids (a target keeps its `[end]` when `keep_last`)."""
    cut = []
    for row in rows:
        if len(row) > max_length:
            row = np.concatenate([row[:max_length - 1], row[-1:]]) if keep_last \
                else row[:max_length]
        cut.append(row)
    return cut


def pair_plan(max_length, batch_tokens=None, batch_size=None, bucket_width=8):
    """Length buckets every `bucket_width` tokens up to `max_length` with batches from
    the `batch_tokens` budget, or one `(batch_size, max_length)` shape (the tutorial's
    fixed-length batches)."""
    if batch_tokens is None:
        return BucketPlan.single(max_length, batch_size)
    return BucketPlan(boundaries_every(bucket_width, max_length), batch_tokens)


class PairBatches(BucketedBatches):
    """Teacher-forcing batches: `({"source", "target": ids[:-1]}, ids[1:], label mask)`.

    A pair goes to the bucket that holds both its source and its target input
    (`len(target) - 1`); both are padded to the bucket's length. Top-up rows repeat
    a real pair of the batch with labels that weigh 0, so the loss and metrics are
    unchanged (and no row is all padding).
    """

    def __init__(self, source, target, plan, seed=None, order=None):
        self.source, self.target = source, target
        lengths = [max(len(s), len(t) - 1) for s, t in zip(source, target, strict=True)]
        super().__init__(plan, lengths, seed, order)

    def make(self, bucket, rows):
        length = self.plan.boundaries[bucket]
        real = rows != EMPTY
        rows = np.where(real, rows, rows[real][0])  # top-up rows: a real pair that weighs 0
        target = pad_rows(take_rows(self.target, rows), length + 1)
        labels = target[:, 1:]
        weights = (labels != 0) & real[:, None]
        return ({"source": pad_rows(take_rows(self.source, rows), length),
                 "target": target[:, :-1]}, labels, weights.astype("float32"))

    def with_order(self, order):
        return PairBatches(self.source, self.target, self.plan, order=order)

    def target_tokens(self):
        """Target tokens predicted in an epoch (padding left out)."""
        return int(sum(len(self.target[i]) - 1 for i in self.rows()))


# ## The compiled model and its batch shapes, from a config (`seq2seq/presets.py`)


def batch_plan(config):
    """The fixed batch shapes of a config (`pair_plan`)."""
    return pair_plan(config.sequence_length,
                              config.batch_tokens if config.bucketing else None,
                              config.batch_size, config.bucket_width)


def build_model(config, source_vocab_size, target_vocab_size):
    """The compiled translator: masked (label-smoothed) cross-entropy, Adam + Noam or
    the tutorial's RMSprop."""
    from workflows.core import devices

    devices.use_precision(config.dtype_policy)
    model = build_translator(config, source_vocab_size, target_vocab_size)
    rate = layers.NoamSchedule(config.embed_dim, config.warmup_steps, scale=config.learning_rate) \
        if config.schedule == "noam" else config.learning_rate
    optimizer = keras.optimizers.Adam(rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9) \
        if config.optimizer == "adam" else keras.optimizers.RMSprop(rate)
    model.compile(optimizer=optimizer, loss=layers.MaskedCrossentropy(config.label_smoothing),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model
