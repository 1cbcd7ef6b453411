"""The n-gram models (`bow`, `nbsvm`): TensorFlow's `TextVectorization`, adapted on the
train texts, turns each review into n-gram features on the fly, in training and inside
the classifier (`preprocessors.NgramFeatures`), which takes raw strings."""

from dataclasses import dataclass

from data_prep.text import SLICE_PLACES
from workflows.core.config import MAX_BATCH_SIZE, MAX_LEARNING_RATE, option, unless
from workflows.sentiment.family import OPTIMIZERS, TrainConfig


@dataclass(frozen=True)
class BowConfig(TrainConfig):
    """Bag of n-grams (multi-hot) -> Dense -> Dropout -> sigmoid.

    The tutorial's bag of bigrams (*Deep Learning with Python* 2e, ch. 11: 20,000 TF-IDF
    n-grams, 16 units, RMSprop at 1e-3) is `--set max_tokens=20000 --set
    output_mode=tf_idf --set hidden_units=16 --set learning_rate=0.001`; these defaults
    (found by `tune` on validation) take IMDB test from 0.879 to 0.908.
    """

    max_tokens: int = option(200000, at_least=2, help="size of the n-gram vocabulary, "
                             "the most frequent in train")
    ngrams: int = option(2, at_least=1, help="longest n-gram: 2 = words and word pairs")
    output_mode: str = option("multi_hot", choices=("tf_idf", "multi_hot", "count"),
                              help="how a text's n-grams are counted: present or not, "
                                   "TF-IDF weights, or counts")
    hidden_units: int = option(32, at_least=1, help="width of the hidden Dense layer")
    dropout: float = option(0.5, at_least=0, below=1, help="dropout rate after it")
    learning_rate: float = option(0.0005, above=0, at_most=MAX_LEARNING_RATE,
                                  help="the optimizer's learning rate")


@dataclass(frozen=True)
class NBSVMConfig(TrainConfig):
    """Binary uni/bi/trigram features scaled by naive-Bayes log-count ratios -> linear
    model with a logistic loss (NBSVM, Wang & Manning 2012; see `NaiveBayesLinear`).

    `beta` < 1 interpolates the weights with their mean magnitude as in the paper (the
    default, 1, is plain NB-weighted logistic regression). `sentence_slices` adds short
    slices of the train reviews (labelled as their review), from anywhere in the review
    or from its end (`slices_from`): what they do to IMDB and to short reviews from
    elsewhere is in benchmarks/RESULTS.md.
    """

    max_tokens: int = option(400000, at_least=2, help="size of the n-gram vocabulary, "
                             "the most frequent in train")
    ngrams: int = option(3, at_least=1, help="longest n-gram: 3 = up to word triples")
    punctuation: str = option("separate", choices=("separate", "strip"),
                              help='separate: "!" and "?" are tokens; strip: dropped')
    sentence_slices: int = option(1, at_least=0, help="slices of 1-2 sentences added "
                                  "per train review, labelled as it; 0: none")
    slices_from: str = option("anywhere", choices=SLICE_PLACES,
                              applies=unless("sentence_slices", 0),
                              help="where in a review its slices are taken")
    alpha: float = option(1.0, above=0, help="smoothing of the naive-Bayes log-count "
                          "ratios")
    beta: float = option(1.0, above=0, at_most=1, help="interpolation of the weights "
                         "with their mean magnitude (Wang & Manning); 1: none")
    l2: float = option(0.0, at_least=0, help="L2 penalty on the linear weights")
    optimizer: str = option("adam", choices=OPTIMIZERS, help="the optimizer")
    learning_rate: float = option(0.0003, above=0, at_most=MAX_LEARNING_RATE,
                                  help="its learning rate")
    batch_size: int = option(64, at_least=1, at_most=MAX_BATCH_SIZE,
                             help="texts a training step")


MODELS = {"bow": BowConfig(model="bow"), "nbsvm": NBSVMConfig(model="nbsvm")}


# ## The models


def _texts(config, prepared, split):
    """(texts, labels) of `split`, with the config's sentence slices of train reviews."""
    from data_prep import imdb

    return imdb.split_texts(prepared, split, getattr(config, "sentence_slices", 0),
                            config.seed, getattr(config, "slices_from", "anywhere"))


def bow_model(config, vocabulary_size, classes=2):
    import keras

    from workflows.sentiment.family import output_layer

    inputs = keras.Input(shape=(vocabulary_size,), name="ngrams")
    x = keras.layers.Dense(config.hidden_units, activation="relu")(inputs)
    x = keras.layers.Dropout(config.dropout)(x)
    outputs = output_layer(classes)(x)
    return keras.Model(inputs, outputs, name=config.model)


def nbsvm_model(config, vocabulary_size, ratios=None, classes=2):
    """Binary n-gram vector (sparse on TensorFlow) -> NaiveBayesLinear -> sigmoid (two
    classes) or softmax over one-vs-rest logits."""
    import keras

    import layers
    from workflows.sentiment.family import output_units

    inputs = keras.Input(shape=(vocabulary_size,), name="ngrams",
                         sparse=keras.backend.backend() == "tensorflow")
    linear = layers.NaiveBayesLinear(config.beta, config.l2, units=output_units(classes))
    activation = "sigmoid" if classes == 2 else "softmax"
    outputs = keras.layers.Activation(activation, dtype="float32")(linear(inputs))
    if ratios is not None:
        linear.set_ratios(ratios)
    return keras.Model(inputs, outputs, name=config.model)


def build_model(config, vocabulary_size, ratios=None, classes=2):
    """The compiled model on `vocabulary_size` n-gram features (NBSVM's weights scaled
    by its log-count `ratios`) for `classes` classes."""
    from workflows.sentiment.family import compiled_classifier

    model = nbsvm_model(config, vocabulary_size, ratios, classes) if config.model == "nbsvm" \
        else bow_model(config, vocabulary_size, classes)
    return compiled_classifier(model, config, classes)


# ## From reviews to features


def ngram_vectorizer(config, prepared):
    """The n-gram `TextVectorization` of `bow` or `nbsvm` (binary and sparse), adapted
    on the train texts (deterministic, so a resumed run gets the same vectorizer back),
    and the standardization its texts go through first: applied outside the layer
    (`NgramFeatures` does), since Keras calls a layer's own standardization callable on
    NumPy arrays on JAX and PyTorch, which a `tf.data` map cannot give it."""
    import keras

    from data_prep import imdb
    from data_prep.text import (
        register_standardizations,
        separate_review_punctuation,
        standardize_any_language,
        standardize_review,
    )

    print(f"Adapting the 1- to {config.ngrams}-gram vocabulary ({config.max_tokens} entries) "
          "on train")
    register_standardizations()
    nbsvm = config.model == "nbsvm"
    separate = nbsvm and config.punctuation == "separate"
    standardize = separate_review_punctuation if separate else standardize_review
    if prepared.settings.standardize == "any_language":  # a user's texts, any script
        standardize = standardize_any_language
    vectorizer = keras.layers.TextVectorization(
        max_tokens=config.max_tokens, ngrams=config.ngrams, standardize=None,
        output_mode="multi_hot" if nbsvm else config.output_mode,
        sparse=nbsvm and keras.backend.backend() == "tensorflow")  # (TensorFlow's alone)
    vectorizer.adapt(imdb.text_dataset(*_texts(config, prepared, "train"), 512)
                     .map(lambda text, label: standardize(text)))
    return vectorizer, standardize


def class_feature_counts(config, features, prepared):
    """`(features, classes)` counts of each n-gram's presence in each class's training
    texts."""
    import tensorflow as tf  # n-gram vectorizers are TensorFlow layers

    from data_prep import imdb

    counts, classes = 0, len(prepared.classes)
    for texts, labels in imdb.text_dataset(*_texts(config, prepared, "train"), 512):
        one_hot = tf.one_hot(labels, classes, dtype=tf.float32)
        present = tf.cast(features(texts), tf.float32)
        counts += tf.sparse.sparse_dense_matmul(present, one_hot, adjoint_a=True) \
            if isinstance(present, tf.SparseTensor) else tf.matmul(present, one_hot,
                                                                    transpose_a=True)
    return counts


def naive_bayes_ratios(counts, alpha):
    """The log-count ratios of two classes (class 1 against class 0), or of each class
    against the others: `(features,)` or `(features, classes)`."""
    import keras

    from layers.naive_bayes_linear import log_count_ratios

    if counts.shape[1] == 2:
        return log_count_ratios(counts[:, 1], counts[:, 0], alpha)
    total = keras.ops.sum(counts, axis=1)
    return keras.ops.stack([log_count_ratios(counts[:, c], total - counts[:, c], alpha)
                            for c in range(counts.shape[1])], axis=1)


def build(config, data):
    """The vectorizer (NBSVM's with its naive-Bayes log-count ratios as the prior), the
    model on its features, and `(features, label)` batches of the train texts (reviews
    and their sentence slices) and validation reviews."""
    import tensorflow as tf  # the vectorizer is a TensorFlow layer

    import layers
    from data_prep import imdb
    from workflows.sentiment.family import Trainable, class_weights
    from workflows.sentiment.preprocessors import NgramFeatures
    from workflows.sentiment.text_classifier import TextClassifier

    prepared, ratios = data.prepared, None
    vectorizer, standardize = ngram_vectorizer(config, prepared)
    preprocessor = NgramFeatures(vectorizer, standardize.__name__)
    features = preprocessor.features
    if config.model == "nbsvm":
        ratios = naive_bayes_ratios(class_feature_counts(config, features, prepared),
                                    config.alpha)
    model = build_model(config, vectorizer.vocabulary_size(), ratios, len(prepared.classes))
    texts = {split: _texts(config, prepared, split) for split in ("train", "val")}
    weights = tf.constant(class_weights(config, texts["train"][1], prepared.classes))

    def batches(split, epoch=None):
        shuffle, seed = epoch is not None, config.seed + (epoch or 0)
        dataset = imdb.text_dataset(*texts[split], config.batch_size, shuffle, seed)
        if split == "train" and config.class_weight != "none":
            return dataset.map(lambda text, label: (features(text), label,
                                                    tf.gather(weights, label)),
                               num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.map(lambda text, label: (features(text), label),
                           num_parallel_calls=tf.data.AUTOTUNE)

    classifier = TextClassifier(model, preprocessor, prepared.classes,
                                requires=[layers.__name__], batch_size=64)
    return Trainable(model, lambda epoch: batches("train", epoch), batches("val"),
                     len(texts["train"][1]), classifier, tags={"model_family": config.model},
                     artifacts={"vocabulary.txt": "\n".join(prepared.vocabulary())})
