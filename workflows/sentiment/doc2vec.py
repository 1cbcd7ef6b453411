"""The paragraph-vector classifier (`doc2vec`): gensim's Doc2Vec (PV-DBOW by default; Le
& Mikolov 2014) trained once on the unlabelled and train reviews, every review's vector
inferred (and cached), then logistic regression (or one hidden layer) on the vectors.

The classifier's preprocessor (`preprocessors.ParagraphVectorInputs`) holds the Doc2Vec
model that infers each text's vector (without its training reviews' own vectors, which
inference never reads), saved as the classifier's asset; its network takes the vectors.
"""

from dataclasses import dataclass

from data_prep.pipelines import untuned
from workflows.core.config import MAX_BATCH_SIZE, MAX_EPOCHS, option, training_option, when
from workflows.sentiment.family import OPTIMIZERS, TrainConfig


@dataclass(frozen=True)
class ParagraphVectorConfig(TrainConfig):
    """Paragraph vectors (see `data_prep.paragraph_vectors`) -> logistic regression (or
    one hidden layer)."""

    augmentable = False  # Doc2Vec's cached vectors are of the prepared reviews only

    vector_size: int = option(100, at_least=1, help="size of each paragraph vector")
    dm: bool = option(False, help="True: PV-DM (the paragraph vector predicts a word with its "
                                 "context) instead of PV-DBOW (it predicts the words alone)")
    # PV-DBOW: train skip-gram word vectors alongside (slower)
    dbow_words: bool = option(False, applies=when("dm", False),
                              help="PV-DBOW: train skip-gram word vectors alongside (slower)")
    window: int = option(10, at_least=1, applies=lambda c: c.dm or c.dbow_words,
                         help="words either side of a word that predict it")
    min_count: int = option(2, at_least=1, help="fewest occurrences of a kept word")
    negative: int = option(5, at_least=1, help="negative samples a prediction")
    sample: float = option(0.0, at_least=0, help="down-sampling threshold of frequent "
                           "words; 0: none")
    doc2vec_epochs: int = option(20, at_least=1, at_most=MAX_EPOCHS,
                                 help="passes of Doc2Vec over the texts")
    hidden_units: int = option(0, at_least=0, help="a hidden layer's width over the "
                               "vectors; 0: logistic regression")
    dropout: float = option(0.0, at_least=0, below=1, applies=lambda c: c.hidden_units > 0,
                            help="dropout rate after the hidden layer")
    optimizer: str = option("adam", choices=OPTIMIZERS, help="the optimizer")
    epochs: int = training_option("epochs", 20)
    batch_size: int = option(64, at_least=1, at_most=MAX_BATCH_SIZE, help="texts a training step")


MODELS = {"doc2vec": ParagraphVectorConfig(model="doc2vec")}


def build_model(config, vector_size, classes=2):
    """Paragraph vector -> [Dense(relu) -> Dropout] -> sigmoid (or softmax)."""
    import keras

    from workflows.sentiment.family import compiled_classifier, output_layer

    inputs = keras.Input(shape=(vector_size,), name="paragraph_vector")
    x = inputs
    if config.hidden_units:
        x = keras.layers.Dense(config.hidden_units, activation="relu")(x)
        x = keras.layers.Dropout(config.dropout)(x)
    outputs = output_layer(classes)(x)
    return compiled_classifier(keras.Model(inputs, outputs, name=config.model), config,
                               classes)


def paragraph_vector_settings(config):
    from data_prep import paragraph_vectors

    return paragraph_vectors.ParagraphVectorSettings(
        config.vector_size, config.dm, config.dbow_words, config.window, config.min_count,
        config.negative, config.sample, config.doc2vec_epochs, config.seed)


def build(config, data):
    """Doc2Vec (trained once), the vectors of the train and validation reviews inferred
    as the served model infers them, and the model on them. The minutes those took are
    logged (`system/doc2vec_train_minutes`, `system/*_inference_minutes`)."""
    import tensorflow as tf  # doc2vec (gensim) runs where TensorFlow does

    from data_prep import paragraph_vectors
    from workflows.sentiment.family import Trainable, class_weights
    from workflows.sentiment.preprocessors import ParagraphVectorInputs
    from workflows.sentiment.text_classifier import TextClassifier

    prepared, settings = data.prepared, paragraph_vector_settings(config)
    weights = class_weights(config, prepared.labels("train"), prepared.classes)
    vectors, folder = paragraph_vectors.load_or_train(prepared, settings)
    inputs, seconds = {}, {"doc2vec_train": paragraph_vectors.training_seconds(folder)}
    for split in ("train", "val"):
        inputs[split], seconds[f"{split}_inference"] = paragraph_vectors.split_vectors(
            prepared, split, settings)

    def batches(split, epoch=None):
        labels = prepared.labels(split)
        columns = (inputs[split], labels) if split != "train" or config.class_weight == "none" \
            else (inputs[split], labels, weights[labels])
        dataset = untuned(tf.data.Dataset.from_tensor_slices(columns))
        if epoch is not None:
            dataset = dataset.shuffle(len(inputs[split]), seed=config.seed + epoch)
        return dataset.batch(config.batch_size).prefetch(2)

    model = build_model(config, vectors.vector_size, len(prepared.classes))
    return Trainable(model, lambda epoch: batches("train", epoch), batches("val"),
                     len(inputs["train"]),
                     TextClassifier(model, ParagraphVectorInputs(vectors), prepared.classes,
                                    batch_size=64),
                     tags={"model_family": "paragraph_vectors"},
                     metrics={"doc2vec_vocabulary_size": len(vectors.model.wv),
                              **{f"{name}_minutes": value / 60
                                 for name, value in seconds.items() if value is not None}})
