"""A GPT-style language model from `layers/`, with typed sublayers and cached steps."""

import keras
from keras import ops

from layers import PositionalEmbedding, TransformerDecoder


@keras.saving.register_keras_serializable(package="nlpkit")
class GPT(keras.Model):
    """Decoder-only Transformer (Radford et al., 2018): token + position embeddings,
    `num_layers` pre-LN `TransformerDecoder` blocks without cross-attention, a final
    LayerNormalization, and logits from the token embedding matrix transposed (tied).

    `call_with_cache(tokens, cache, index)` runs the newest token(s) only, reading and
    writing each block's key/value cache: the base of cached generation.

    Args:
        vocabulary_size: int. max_length: int, the longest sequence (positions).
        embed_dim, dense_dim, num_heads, num_layers: int. Block sizes.
        dropout: float. After the embeddings and inside the blocks.
        dtype: dtype policy of every sublayer (the logits are always float32).
    """

    def __init__(self, vocabulary_size, max_length, embed_dim=256, dense_dim=1024, num_heads=4,
                 num_layers=4, dropout=0.1, dtype=None, **kwargs):
        embedding = PositionalEmbedding(max_length, vocabulary_size, embed_dim, dtype=dtype,
                                        name="embedding")
        blocks = [TransformerDecoder(embed_dim, dense_dim, num_heads, dropout=dropout,
                                     norm_first=True, dtype=dtype, name=f"decoder_{index}")
                  for index in range(num_layers)]
        final_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=dtype, name="final_norm")
        tokens = keras.Input((None,), dtype="int32", name="token_ids")
        x = keras.layers.Dropout(dropout, dtype=dtype, name="embedding_dropout")(embedding(tokens))
        for block in blocks:
            x = block(x)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(
            embedding(final_norm(x), reverse=True))
        kwargs.setdefault("name", "gpt")
        super().__init__(tokens, logits, **kwargs)
        self.embedding, self.blocks, self.final_norm = embedding, blocks, final_norm
        self.vocabulary_size, self.max_length = vocabulary_size, max_length
        self.embed_dim, self.dense_dim, self.num_heads = embed_dim, dense_dim, num_heads
        self.num_layers, self.dropout = num_layers, dropout
        self.sublayer_dtype = embedding.dtype_policy

    def initial_cache(self, batch_size, max_length):
        return tuple(block.initial_cache(batch_size, max_length) for block in self.blocks)

    def call_with_cache(self, tokens, cache, index):
        """Float32 logits `(batch, length, vocabulary)` for `tokens` at positions
        `index...`, and the updated cache."""
        x = self.embedding(tokens, start_index=index)
        updated = []
        for block, block_cache in zip(self.blocks, cache, strict=True):
            x, block_cache = block(x, self_attention_cache=block_cache, cache_update_index=index)
            updated.append(block_cache)
        logits = self.embedding(self.final_norm(x), reverse=True)
        return ops.cast(logits, "float32"), tuple(updated)

    def get_config(self):
        return {"name": self.name, "dtype": keras.dtype_policies.serialize(self.sublayer_dtype),
                "vocabulary_size": self.vocabulary_size, "max_length": self.max_length,
                "embed_dim": self.embed_dim, "dense_dim": self.dense_dim,
                "num_heads": self.num_heads, "num_layers": self.num_layers,
                "dropout": self.dropout}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
