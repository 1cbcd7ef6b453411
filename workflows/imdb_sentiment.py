"""IMDB sentiment: n-grams, word and paragraph vectors, RNNs, Transformers; tracked in MLflow.

The lesson of Deep Learning with Python (2e, ch. 11), made into steps you run and
rerun one at a time:

    python -m workflows.imdb_sentiment prepare --imdb-path ../shared/data/aclImdb_v1.tar.gz
    python -m workflows.imdb_sentiment train --model bilstm_glove
    python -m workflows.imdb_sentiment evaluate
    python -m workflows.imdb_sentiment predict "A gripping, beautifully shot film."
    python -m workflows.imdb_sentiment compare

Each training run is one MLflow run (params, per-epoch metrics, timings, plots, and
a model that takes raw strings); `python -m workflows.mlflow_ui` shows them side by side.
"""

import dataclasses
import importlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from data_prep import glove, imdb
from data_prep.commands import run_main
from workflows.core.cli import LessonCLI, check_texts, read_texts
from workflows.core.config import Catalog, ConfigError
from workflows.core.lesson import Built, Lesson, ModelExport, RunDataset, dataset_digest

EXPERIMENT = "imdb_sentiment"
PYFUNC_FILE = Path(__file__).parent / "sentiment" / "pyfunc.py"  # every classifier folder
# `ensemble`: what the weights are fitted on (the validation reviews, or them and a slice
# of one or two sentences of each, labelled as its review: weights and confidence for
# short text), and a general-purpose lexicon to add as a member (`sentiment/lexicon.py`)
FIT_ON = ("reviews", "reviews+slices")
LEXICONS = ("none", "vader")
EXAMPLES = ["A gripping, beautifully shot film.", "Dull, predictable and far too long."]


# ## The models
# One module of `sentiment/` per model family: its config (the defaults are the
# tutorial's settings), its Keras model, how reviews become its inputs, its classifier
# (saved as a folder and loaded back) and `build(config, data)`, which gives `train`
# the model, its batches and its classifier (`sentiment/family.py`: `Trainable`).

FAMILIES = {  # --model -> its module
    "bow": "ngrams", "nbsvm": "ngrams",
    "bilstm": "rnn", "bilstm_glove": "rnn", "bilstm_word2vec": "rnn", "lstm": "rnn",
    "gru": "rnn", "rnn": "rnn",
    "transformer": "transformer", "transformer_sine": "transformer",
    "doc2vec": "doc2vec", "encoder": "encoder", "lm_classifier": "lm_classifier",
}


def family(model):
    """The module of `--model`'s family (imported when first asked for)."""
    return importlib.import_module(f"workflows.sentiment.{FAMILIES[model]}")


CATALOG = Catalog({model: {"default": lambda model=model: family(model).MODELS[model]}
                   for model in FAMILIES})


def complete_config(config):
    """What a config needs from other runs: `lm_classifier`'s language model (its run
    id, architecture, vocabulary and dtype policy); `augment=round_trip`'s translators."""
    complete = getattr(family(config.model), "complete_config", None)
    config = complete(config) if complete else config
    if config.augment == "round_trip":
        from workflows.sentiment import augmentation

        config = dataclasses.replace(config, **{
            role: augmentation.translation_run(getattr(config, role), role).info.run_id
            for role in augmentation.DIRECTIONS})
    return config


# ## Prepare the data
# Reviews, vocabulary and token ids come from data_prep (cached); embeddings too.


def data_settings(config=None):
    """The prepared-data settings a config needs: the vocabulary size and length of the
    token ids if it reads them, its validation share (the unlabelled reviews feed
    Word2Vec and Doc2Vec)."""
    fields = {name: getattr(config, name) for name in ("max_tokens", "sequence_length")}  \
        if hasattr(config, "max_tokens") and hasattr(config, "sequence_length") else {}
    if config is not None:
        fields["val_fraction"] = config.val_fraction
    return imdb.ImdbSettings(include_unlabelled=True, **fields)


def prepare(imdb_path=None, work_dir=None, word2vec_vectors=True, glove_source=None,
            glove_dim=None):
    """Prepares the reviews (and Word2Vec vectors) and prints a summary with coverage."""
    started = time.perf_counter()
    prepared = imdb.prepare(imdb_path, data_settings(), work_dir)
    summary = {"directory": str(prepared.directory), **prepared.summary}
    from workflows.sentiment import rnn

    kinds = ("glove", "word2vec") if word2vec_vectors else ("glove",)
    for kind in kinds:
        vectors = rnn.load_embedding_vectors(kind, prepared, glove_source, glove_dim)
        _, coverage = glove.build_embedding_matrix(prepared.vocabulary(), vectors)
        summary[kind] = {"source": vectors.source, **coverage.as_dict()}
    print(json.dumps(summary, indent=2))
    print(f"Prepared in {time.perf_counter() - started:.1f} s")
    return prepared


@dataclass
class ImdbData:
    prepared: imdb.PreparedImdb  # or `AugmentedImdb`: its train split has extra rows
    fingerprint: str  # the prepared folder, a hash of its vocabulary, the augmentation
    augmentation: dict = dataclasses.field(default_factory=dict)  # what was added
    encoder: Path | None = None  # `encoder`: the pretrained encoder's folder


def load_data(config, imdb_path=None, work_dir=None):
    """The prepared reviews `config` trains on (augmented if it says so) and their
    fingerprint, which includes a pretrained encoder's weights."""
    from data_prep import cache

    prepared = imdb.prepare(imdb_path, data_settings(config), work_dir, verbose=False)
    vocabulary_hash = cache.sha256_of(prepared.directory / "vocabulary.txt")[:12]
    fingerprint = f"{prepared.directory.name}:{vocabulary_hash}"
    folder = None
    if getattr(config, "encoder", None):  # its weights are part of what a run trains on
        from data_prep import encoders

        folder = encoders.encoder_folder(config.encoder, work_dir)
        fingerprint += ":encoder-" + encoders.encoder_digest(folder, work_dir)[:16]
    if config.augment == "none":
        return ImdbData(prepared, fingerprint, encoder=folder)
    from workflows.sentiment import augmentation

    added = augmentation.augment(config, prepared, work_dir)
    return ImdbData(augmentation.AugmentedImdb(prepared, added),
                    f"{fingerprint}:{added.name}", added.summary, folder)


def augment(config, imdb_path=None, work_dir=None):
    """`augment`: makes (or finds) the augmented train rows `config` trains on, ahead of
    `train`, and prints a few with the reviews they came from."""
    from workflows.sentiment import augmentation

    if config.augment == "none":
        raise ConfigError("Say which augmentation: --augment round_trip (paraphrases by "
                          "the translation lesson's translators) or --augment edit.")
    data = load_data(config, imdb_path, work_dir)
    added, originals = data.prepared.augmentation, data.prepared.prepared.texts("train")
    picked = augmentation.units(originals, config.augment_unit, config.augment_copies,
                                config.augment_fraction, config.seed)
    for (_, _, text), made in list(zip(picked, added.texts, strict=True))[:3]:
        print(f"  {text[:150]}\n  -> {made[:150]}")
    print(json.dumps({"fingerprint": data.fingerprint, **data.augmentation}, indent=2))
    return data


# ## Train
# The lesson's hooks: the data, the model of the config's family, a resumable fit that
# stops early on the validation loss, the export of the classifier with its Platt
# scaling. `core/training.py` runs them in that order, in a tracked run.


class SentimentLesson(Lesson):
    """The lesson's hooks, in the order `core/training.py` runs them."""

    experiment, catalog = EXPERIMENT, CATALOG
    packages = ("sentiment",)
    compare_columns = ("run_id", "params.model", "params.embedding", "params.epochs",
                       "params.batch_size", "params.learning_rate",
                       "metrics.best_val_accuracy", "metrics.test_accuracy",
                       "metrics.test_roc_auc", "metrics.mean_epoch_seconds", "start_time")
    sort_by = "metrics.test_accuracy"

    def complete_config(self, config):
        return complete_config(config)

    def load_data(self, config, place):
        return load_data(config, place.path, place.work_dir)

    def datasets(self, config, data, place):
        added = f" + {config.augment}" if data.augmentation else ""
        return [RunDataset(f"aclImdb {split}{added if split == 'train' else ''}",
                           dataset_digest(data.fingerprint, split),
                           str(data.prepared.directory), context,
                           len(data.prepared.labels(split)))
                for split, context in (("train", "training"), ("val", "validation"))]

    def build(self, config, data, place):
        trainable = family(config.model).build(config, data)
        added = {key: value for key, value in data.augmentation.items()
                 if isinstance(value, (int, float))}
        return Built(trainable.model, trainable, tags=trainable.tags,
                     artifacts={**trainable.artifacts, **({"augmentation.json":
                                data.augmentation} if data.augmentation else {})},
                     metrics={**trainable.metrics, **added})

    def fit(self, run, config, data, built):
        trainable = built.parts
        run.fit(trainable.train_batches, trainable.validation_batches,
                trainable.train_examples)

    def export(self, config, data, built):
        return ModelExport("classifier", calibrated(built.parts.classifier, data.prepared),
                           PYFUNC_FILE, EXAMPLES[:1], packages=("sentiment", "causal_lm"),
                           requirements=("gensim",) if config.model == "doc2vec" else ())


LESSON = SentimentLesson()


def calibrated(classifier, prepared):
    """`save(folder)`: the classifier, then its Platt scaling, fitted on the validation
    reviews (never test) as the saved classifier scores them."""
    from workflows.sentiment.calibration import Calibration
    from workflows.sentiment.family import load_classifier

    def save(folder):
        classifier.save(folder)
        probabilities = load_classifier(folder).predict(prepared.texts("val"))
        fitted = Calibration.fit(prepared.labels("val"), probabilities)
        fitted.save(folder)
        print(f"Calibration on the validation reviews: p -> sigmoid({fitted.slope:.3f} "
              f"logit(p) + {fitted.intercept:.3f})")

    return save


# ## Evaluate and use the model
# Both go through the logged pyfunc model, so they test exactly what users load.


def evaluate(run_id=None, imdb_path=None, work_dir=None, model_uri=None, top_wrong=20,
             texts_file=None, text_column=None, label_column=None):
    """Metrics of a run's model on the test reviews, or on the labelled texts of
    `texts_file` (see `data_prep.labelled_texts`), printed and logged back to that run.

    Metric names start with `test_`, or with `texts_<file stem>_`, so one run holds
    its scores on several files.
    """
    from data_prep import cache
    from data_prep.labelled_texts import read_labelled_texts
    from workflows.core import models, runs, tracking
    from workflows.sentiment import evaluation

    source = {}
    if texts_file:
        texts, labels = read_labelled_texts(texts_file, text_column, label_column)
        name = "texts_" + re.sub(r"[^0-9a-zA-Z]+", "_", Path(texts_file).stem).strip("_").lower()
        source = {"file": str(texts_file), "sha256": cache.sha256_of(texts_file)}
    run = runs.model_run(LESSON, run_id, model_uri)
    model = models.load_pyfunc(run)
    if not texts_file:  # an ensemble has no config: any settings give the same test reviews
        config = runs.config_of(LESSON, run) if run.data.params.get("model") in \
            CATALOG.models else None
        prepared = imdb.prepare(imdb_path, data_settings(config), work_dir, verbose=False)
        texts, labels, name = prepared.texts("test"), prepared.labels("test"), "test"
    tracking.log_datasets([RunDataset(
        Path(texts_file).name if texts_file else "aclImdb test",
        source["sha256"][:12] if texts_file else dataset_digest(prepared.directory.name, name),
        str(texts_file or prepared.directory), "test", len(texts))], run.info.run_id)
    return evaluation.score_and_log(run, model, (texts, labels, name, source), top_wrong)


def check_reviews(texts):
    """Refuses no reviews, or a review with no words to judge."""
    check_texts(texts, "review")
    blank = [i for i, text in enumerate(texts) if isinstance(text, str) and not text.strip()]
    if blank:
        raise ConfigError(f"Review {blank[0] + 1} is empty: a review needs words to be judged.")


def predict(texts, run_id=None, model_uri=None):
    """Label and probability for each text, printed; returns the probabilities."""
    from workflows.core import models, runs

    check_reviews(texts)
    run = runs.model_run(LESSON, run_id, model_uri)
    probabilities = models.load_pyfunc(run).predict(list(texts))
    for text, probability in zip(texts, probabilities, strict=True):
        label = "positive" if probability >= 0.5 else "negative"
        preview = " ".join(text.split())
        preview = preview if len(preview) <= 70 else preview[:67] + "..."
        print(f"{label:8}  {probability:.3f}  {preview}")
    return probabilities


def ensemble(run_ids, imdb_path=None, work_dir=None, lexicon="none", fit_on="reviews",
             calibrate_on=None, text_column=None, label_column=None):
    """One model from the models of `run_ids` (and a sentiment `lexicon`): their
    probabilities combined by weights fitted on the validation reviews (never the test
    reviews; with a sentence slice of each for `fit_on="reviews+slices"`), and its
    confidence by length fitted on the labelled texts of `calibrate_on` (read like
    `evaluate`'s), logged as its own run with a pyfunc that holds every member
    (`sentiment/ensemble_run.py`). Returns its run id (an ensemble of the same members
    and settings is reused)."""
    from workflows.sentiment import ensemble_run

    calibration_texts = ensemble_run.calibration_texts(calibrate_on, text_column,
                                                       label_column) if calibrate_on else None

    def validation(member_runs):
        fractions = {float(run.data.params.get("val_fraction", imdb.ImdbSettings.val_fraction))
                     for run in member_runs}
        if len(fractions) > 1:
            raise ConfigError(f"The runs hold out different validation shares ({sorted(fractions)}"
                              "): ensemble runs trained with the same --set val_fraction.")
        settings = dataclasses.replace(data_settings(), val_fraction=fractions.pop())
        prepared = imdb.prepare(imdb_path, settings, work_dir, verbose=False)
        return (prepared.texts("val"), prepared.labels("val"), prepared.directory.name,
                {"val_fraction": settings.val_fraction})

    return ensemble_run.ensemble(EXPERIMENT, run_ids, validation, EXAMPLES[:1], lexicon,
                                 fit_on, calibration_texts)


def compare(sort_by=None, model=None, since=None, style="text", ascending=False):
    """Prints this lesson's runs as a table, best first; returns the rows."""
    from workflows.core import runs

    return runs.compare(LESSON, sort_by, model, since, style, ascending)


# ## Command line


def run_lesson(args):
    """`run`: prepare, then train, evaluate and try out each model; compare them."""
    from workflows.core import runs

    configs = CLI.configs(args, args.model or ["bow", "bilstm_glove"])
    uses_word2vec = any(getattr(c, "embedding", "") == "word2vec" for c in configs)
    prepare(args.imdb_path, args.work_dir, uses_word2vec, args.glove, args.glove_dim)
    for config in configs:
        run_id = CLI.train_config(args, config)
        evaluate(run_id, args.imdb_path, args.work_dir)
        predict(EXAMPLES, run_id)
    compare()
    runs.print_where_results_are(LESSON, args.work_dir)


CLI = LessonCLI(LESSON, "workflows.imdb_sentiment", __doc__.split("\n")[0], imdb.ACL_IMDB,
                shortcuts={"batch_size": None,
                           "glove": "GloVe .txt/.zip or gensim .kv file (default: the "
                                    f"{glove.PACKAGE_SOURCE} package)",
                           "glove_dim": "dimension to read from glove.6B.zip",
                           "init_from": "lm_classifier: the language_model run (id or "
                                        "prefix) or model URI to fine-tune",
                           "fine_tune_embeddings": "let GloVe/Word2Vec vectors train "
                                                   "(default: frozen)",
                           "augment": "more train rows: round_trip (paraphrases through the "
                                      "translation lesson's runs) or edit (random deletions "
                                      "and swaps); default none",
                           "translator": "round_trip: the en-es translation run (default: "
                                         "the latest)",
                           "back_translator": "round_trip: the es-en translation run "
                                              "(default: the latest)"},
                switches=("fine_tune_embeddings",))
_prepare = CLI.step("prepare", "prepare reviews, vocabulary and embeddings", lambda a: prepare(
    a.imdb_path, a.work_dir, not a.skip_word2vec, a.glove, a.glove_dim), data=True)
_prepare.add_argument("--glove", help="GloVe .txt/.zip or gensim .kv file")
_prepare.add_argument("--glove-dim", type=int, help="dimension to read from glove.6B.zip")
_prepare.add_argument("--skip-word2vec", action="store_true",
                      help="do not train the Word2Vec vectors (about 5 min, once)")
CLI.step("augment", "make the augmented train rows a config trains on (train makes them "
         "too): --augment round_trip or edit", lambda a: augment(
             CLI.configs(a)[0], a.imdb_path, a.work_dir), data=True, train="config")
CLI.step("train", "train one model (resumes an interrupted run)", CLI.train, data=True,
         train="one")
CLI.step("run", "prepare, train, evaluate and predict, for each --model (default: bow and "
         "bilstm_glove)", run_lesson, data=True, train="many")
_evaluate = CLI.step(
    "evaluate", "metrics of a run on the test reviews (or on --texts), logged to it",
    lambda a: evaluate(a.run_id, a.imdb_path, a.work_dir, a.model_uri, texts_file=a.texts,
                       text_column=a.text_column, label_column=a.label_column),
    data=True, model=True)
_evaluate.add_argument("--texts", metavar="FILE", help="labelled texts to score instead of "
                       "the test reviews: text<TAB>label per line (after a header line if "
                       "it names the columns), or a .csv file with a header; labels 1/0, "
                       "pos/neg or positive/negative")
_evaluate.add_argument("--text-column", help="the column of the texts, in a file with a "
                       "header (default: text, review, sentence or content)")
_evaluate.add_argument("--label-column", help="the column of the labels, in a file with a "
                       "header (default: label or sentiment)")
CLI.step("predict", "classify reviews with a run's model", lambda a: predict(
    read_texts(a.texts, a.file, "reviews to classify"), a.run_id, a.model_uri), model=True,
    texts="reviews to classify",
    check=lambda a: check_reviews(read_texts(a.texts, a.file, "reviews to classify")))
_ensemble = CLI.step("ensemble", "combine the models of several runs (weights fitted on the "
                     "validation reviews)", lambda a: ensemble(
                         a.run_id, a.imdb_path, a.work_dir, a.lexicon, a.fit_on,
                         a.calibrate_on, a.text_column, a.label_column), data=True)
_ensemble.add_argument("--run-id", action="append", help="a member run (id or prefix, as "
                       "`compare` prints it); two or more, or one with --lexicon or "
                       "--calibrate-on")
_ensemble.add_argument("--lexicon", choices=LEXICONS, default="none", help="add a general "
                       "sentiment lexicon's score as a column (vader: VADER, written for "
                       "short text of any domain)")
_ensemble.add_argument("--fit-on", choices=FIT_ON, default="reviews", help="fit the weights "
                       "on the validation reviews, or on them and a slice of one or two "
                       "sentences of each (weights and confidence that also suit short text)")
_ensemble.add_argument("--calibrate-on", metavar="FILE", help="labelled texts of the domain "
                       "the model will serve (as evaluate --texts reads them; never the ones "
                       "you evaluate on): its confidence at their lengths is fitted on them, "
                       "its decisions kept")
_ensemble.add_argument("--text-column", help="--calibrate-on: the column of the texts")
_ensemble.add_argument("--label-column", help="--calibrate-on: the column of the labels")
CLI.shared_steps()
main = CLI.main

if __name__ == "__main__":
    run_main(main)
