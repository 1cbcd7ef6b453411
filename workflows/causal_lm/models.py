"""A GPT-style language model from `layers/`, with typed sublayers and cached steps, and
a classifier on top of its decoder stack (for transfer to sentiment)."""

import keras
from keras import ops

import layers
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
        embedding_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embedding_dropout")
        tokens = keras.Input((None,), dtype="int32", name="token_ids")
        x = embedding_dropout(embedding(tokens))
        for block in blocks:
            x = block(x)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(
            embedding(final_norm(x), reverse=True))
        kwargs.setdefault("name", "gpt")
        super().__init__(tokens, logits, **kwargs)
        self.embedding, self.blocks, self.final_norm = embedding, blocks, final_norm
        self.embedding_dropout = embedding_dropout
        self.vocabulary_size, self.max_length = vocabulary_size, max_length
        self.embed_dim, self.dense_dim, self.num_heads = embed_dim, dense_dim, num_heads
        self.num_layers, self.dropout = num_layers, dropout
        self.sublayer_dtype = embedding.dtype_policy

    def hidden_states(self, tokens, training=None):
        """The final-norm outputs `(batch, length, embed_dim)`: the features under the
        logits, for a head of another task."""
        x = self.embedding_dropout(self.embedding(tokens), training=training)
        for block in self.blocks:
            x = block(x, training=training)
        return self.final_norm(x)

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


@keras.saving.register_keras_serializable(package="nlpkit")
class GPTClassifier(keras.Model):
    """A GPT's decoder stack under a pooled classifier head (ULMFiT-style).

    Texts longer than the GPT's `max_length` are cut into consecutive chunks of that
    length, each read by the (causal) stack on its own; the hidden states of every
    real token (id != `pad_id`) are pooled over the whole text, by mean and by max,
    concatenated (Howard & Ruder's concat pooling), and mapped to P(positive), or
    with `num_classes` > 1 to the probability of each class.

    Args:
        backbone: a `GPT` (pretrained, or new to train from scratch).
        dropout: float. Before the output layer.
        pad_id: int. The padding token id (`0`).
        num_classes: int. `1` (default): one sigmoid; more: a softmax.
    """

    def __init__(self, backbone, dropout=0.1, pad_id=0, num_classes=1, **kwargs):
        kwargs.setdefault("name", "gpt_classifier")
        super().__init__(**kwargs)
        self.backbone, self.dropout, self.pad_id = backbone, dropout, pad_id
        self.num_classes = num_classes
        self.head_dropout = keras.layers.Dropout(dropout, name="head_dropout")
        self.head = keras.layers.Dense(num_classes, activation="sigmoid" if num_classes == 1
                                       else "softmax", dtype="float32", name="head")
        self.build()

    def build(self, input_shape=None):
        self.head.build((None, 2 * self.backbone.embed_dim))
        self.built = True

    def call(self, tokens, training=None):
        tokens = ops.convert_to_tensor(tokens, "int32")
        chunk = self.backbone.max_length
        tokens = ops.pad(tokens, [[0, 0], [0, (-ops.shape(tokens)[1]) % chunk]],
                         constant_values=self.pad_id)
        hidden = self.backbone.hidden_states(ops.reshape(tokens, (-1, chunk)), training)
        hidden = ops.reshape(ops.cast(hidden, "float32"),
                             (ops.shape(tokens)[0], -1, self.backbone.embed_dim))
        real = ops.expand_dims(ops.not_equal(tokens, self.pad_id), -1)
        count = ops.maximum(ops.sum(ops.cast(real, "float32"), axis=1), 1.0)
        mean = ops.sum(ops.where(real, hidden, 0.0), axis=1) / count
        maximum = ops.max(ops.where(real, hidden, -1e9), axis=1)
        features = ops.concatenate([mean, ops.maximum(maximum, -1e4)], axis=-1)
        return self.head(self.head_dropout(features, training=training))

    def get_config(self):
        return {"name": self.name, "dropout": self.dropout, "pad_id": self.pad_id,
                "num_classes": self.num_classes,
                "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        backbone = keras.saving.deserialize_keras_object(config.pop("backbone"))
        return cls(backbone, **config)


# ## The compiled model, from a config (`causal_lm/presets.py`)


def build_model(config, vocabulary_size, source=None):
    """A new GPT, or the model to fine-tune; compiled with AdamW and warmup + decay."""
    from workflows.core import precision

    precision.use_precision(config.dtype_policy)
    model = source.model if source else GPT(
        vocabulary_size, config.sequence_length, config.embed_dim, config.dense_dim,
        config.num_heads, config.num_layers, config.dropout)
    total = max(config.epochs * config.steps_per_epoch, config.warmup_steps + 1)
    schedule = layers.WarmupLinearDecay(config.learning_rate, config.warmup_steps, total,
                                        end_learning_rate=config.learning_rate / 10)
    model.compile(optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01),
                  loss=source.training_loss() if source else layers.MaskedCrossentropy(),
                  weighted_metrics=["accuracy"])
    return model
