"""The Transformer encoder classifier (`transformer`, `transformer_sine`): the
tutorial's model on the prepared token ids, with learned or sinusoidal positions."""

from dataclasses import dataclass

from workflows.core.config import option, training_option
from workflows.sentiment.family import TrainConfig


@dataclass(frozen=True)
class TransformerConfig(TrainConfig):
    """PositionalEmbedding -> TransformerEncoder -> max pooling -> Dropout -> sigmoid."""

    max_tokens: int = option(20000, at_least=2, help="size of the word vocabulary, the "
                             "most frequent in train")
    sequence_length: int = option(600, at_least=1, help="tokens of a text read, the "
                                  "first ones")
    embed_dim: int = option(256, at_least=1, help="size of the token vectors")
    num_heads: int = option(2, at_least=1, help="attention heads")
    dense_dim: int = option(32, at_least=1, help="width of the feed-forward layer")
    position: str = option("learned", choices=("learned", "sine"),
                           help="position embeddings: learned, or Vaswani's sinusoids")
    dropout: float = option(0.5, at_least=0, below=1, help="dropout rate before the "
                            "output layer")
    epochs: int = training_option("epochs", 20)


MODELS = {
    "transformer": TransformerConfig(model="transformer"),
    "transformer_sine": TransformerConfig(model="transformer_sine", position="sine"),
}


def build_model(config, vocabulary_size, classes=2):
    import keras

    import layers
    from workflows.sentiment.family import compiled_classifier, output_layer

    inputs = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    x = layers.PositionalEmbedding(config.sequence_length, vocabulary_size, config.embed_dim,
                                   position=config.position)(inputs)
    x = layers.TransformerEncoder(config.embed_dim, config.dense_dim, config.num_heads)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dropout(config.dropout)(x)
    outputs = output_layer(classes)(x)
    return compiled_classifier(keras.Model(inputs, outputs, name=config.model), config,
                               classes)


def build(config, data):
    """The model on the prepared token ids, every batch at the full length."""
    from workflows.sentiment import token_ids

    model = build_model(config, len(data.prepared.vocabulary()), len(data.prepared.classes))
    return token_ids.trainable(config, data.prepared, model, bucketing=False,
                               tags={"model_family": "transformer"})
