"""The Transformer translator (Vaswani et al.; the tutorial's, by default): one model
family of the translation lesson, built from `layers/`.

A functional Keras model (`{"source": ids, "target": ids}` -> next-token logits) that
trains with `fit` and saves as a `.keras` file. Like keras-hub's causal LMs, it keeps
typed references to its sublayers and offers what cached decoding needs:
`initial_cache(source, max_length)` runs the encoder once, and
`call_with_cache(token, cache, index)` returns the logits of the next token from the
newest one. Backend-agnostic (`keras.ops` only). `build(config, ...)` makes one from a
`TranslationConfig` (`seq2seq/presets.py`).
"""

import keras
from keras import ops

from data_prep.text import PAD_ID
from layers import PositionalEmbedding, ScannedBlocks, TransformerDecoder, TransformerEncoder


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
        scan_blocks: bool. Each stack is one `ScannedBlocks` (its weights stacked, the
            block compiled once, not once per layer) rather than a list of blocks.
        dtype: dtype policy of every sublayer (the logits are always float32).
    """

    def __init__(self, source_vocabulary_size, target_vocabulary_size, max_length,
                 embed_dim=256, dense_dim=2048, num_heads=8, key_dim=None, encoder_layers=1,
                 decoder_layers=1, dropout=0.0, output_dropout=0.5, norm_first=False,
                 position="learned", tie_embeddings=False, scale_embeddings=False, dtype=None,
                 share_embeddings=False, scan_blocks=False, **kwargs):
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
        features = (None, None, embed_dim)
        if scan_blocks:
            encoder_blocks = ScannedBlocks(TransformerEncoder(**block, name="encoder"),
                                           encoder_layers, dtype=dtype, name="encoder_blocks")
            decoder_blocks = ScannedBlocks(TransformerDecoder(**block, name="decoder"),
                                           decoder_layers, dtype=dtype, name="decoder_blocks")
            encoder_blocks.build(features)
            decoder_blocks.build(features, features)
        else:
            encoder_blocks = [TransformerEncoder(**block, name=f"encoder_{index}")
                              for index in range(encoder_layers)]
            decoder_blocks = [TransformerDecoder(**block, name=f"decoder_{index}")
                              for index in range(decoder_layers)]
        encoder_norm = norm("encoder_norm")
        decoder_norm = norm("decoder_norm")
        output_projection = None if tie_embeddings else keras.layers.Dense(
            target_vocabulary_size, dtype="float32", name="logits")

        # === Functional model ===
        source = keras.Input((None,), dtype="int32", name="source")
        target = keras.Input((None,), dtype="int32", name="target")
        x = keras.layers.Dropout(dropout, dtype=dtype, name="source_dropout")(
            source_embedding(source))
        y = keras.layers.Dropout(dropout, dtype=dtype, name="target_dropout")(
            target_embedding(target))
        if scan_blocks:  # Keras fills in no masks for a scan: they are given
            source_mask, target_mask = ops.not_equal(source, PAD_ID), ops.not_equal(target, PAD_ID)
            x = encoder_blocks(x, mask=source_mask)
        else:
            for encoder in encoder_blocks:
                x = encoder(x)
        if encoder_norm:
            x = encoder_norm(x)
        if scan_blocks:
            y = decoder_blocks(y, x, decoder_sequence_mask=target_mask,
                               encoder_sequence_mask=source_mask)
        else:
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
        self.scan_blocks = scan_blocks
        self.sublayer_dtype = source_embedding.dtype_policy

    def encode(self, source, source_mask):
        """The encoder stack's output for padded source ids."""
        x = self.source_embedding(source)
        if self.scan_blocks:
            x = self.encoder_blocks(x, mask=source_mask)
        else:
            for encoder in self.encoder_blocks:
                x = encoder(x, mask=source_mask)
        return self.encoder_norm(x) if self.encoder_norm else x

    def initial_cache(self, source, max_length):
        """Per decoder block: an empty self-attention cache and the projected encoder output."""
        source_mask = ops.not_equal(source, PAD_ID)
        encoded = self.encode(source, source_mask)
        batch = ops.shape(source)[0]
        decoders = self._decoders()
        return (tuple(d.initial_cache(batch, max_length) for d in decoders),
                tuple(d.cross_attention_cache(encoded) for d in decoders),
                source_mask)

    def call_with_cache(self, token, cache, index):
        """Float32 logits `(batch, vocabulary)` after `token` `(batch, 1)` at `index`."""
        self_caches, cross_caches, source_mask = cache
        x = self.target_embedding(token, start_index=index)
        updated = []
        for decoder, self_cache, cross_cache in zip(self._decoders(), self_caches,
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
        for decoder in self._decoders():
            y, scores = decoder(y, encoded, encoder_sequence_mask=source_mask,
                                return_attention_scores=True)
        return ops.mean(scores[0], axis=0)

    def _decoders(self):
        """The decoder blocks, one by one (a scanned stack's as views)."""
        return self.decoder_blocks.views() if self.scan_blocks else self.decoder_blocks

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
                "share_embeddings": self.share_embeddings, "scan_blocks": self.scan_blocks}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def build(config, source_vocabulary_size, target_vocabulary_size):
    """The Transformer a config describes (its field names are the arguments')."""
    return TransformerTranslator(
        source_vocabulary_size, target_vocabulary_size, config.sequence_length,
        config.embed_dim, config.dense_dim, config.num_heads, config.key_dim,
        config.encoder_layers, config.decoder_layers, config.dropout, config.output_dropout,
        config.norm_first, config.position, config.tie_embeddings, config.scale_embeddings,
        share_embeddings=config.share_embeddings, scan_blocks=config.scan_blocks)
