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

from data_prep import glove, imdb, text_classes
from process.commands import run_main
from workflows.core.cli import LessonCLI
from workflows.core.config import Catalog, ConfigError
from workflows.core.lesson import Built, Lesson, ModelExport, RunDataset, dataset_digest
from workflows.core.step_inputs import check_texts, read_texts
from workflows.core.whole_lesson import Trained, WholeLesson, add_whole_lesson
from workflows.sentiment.family import CLASS_WEIGHTS
from workflows.sentiment.sources import (
    EXAMPLES,
    TEXTS_OPTIONS,
    ImdbReviews,
    classes_of_run,
    source_of,
    source_of_run,
    validation_texts,
)
from workflows.sentiment.user_texts import (
    encoder_missing,
    leaderboard_budget,
    leaderboard_models,
    print_leaderboard,
    scored_texts,
    validation_score,
)

EXPERIMENT = "imdb_sentiment"
IMDB = ImdbReviews()  # the reviews at $NLPKIT_IMDB_PATH, in the cache, or downloaded
PYFUNC_FILE = Path(__file__).parent / "sentiment" / "pyfunc.py"  # every classifier folder
# `ensemble`: its weights fitted on the validation reviews (and a slice of one or two
# sentences of each: for short text); a lexicon added as a member (`sentiment/lexicon.py`)
FIT_ON = ("reviews", "reviews+slices")
LEXICONS = ("none", "vader")


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
# The labelled texts come from one source (`sentiment/sources.py`: the IMDB reviews or
# a user's file), prepared by data_prep (cached); embeddings too.


def data_settings(source, config=None):
    """The prepared-data settings of `source` a config needs: the vocabulary size and
    length of the token ids if it reads them, its validation share."""
    fields = {name: getattr(config, name) for name in ("max_tokens", "sequence_length")}  \
        if hasattr(config, "max_tokens") and hasattr(config, "sequence_length") else {}
    if config is not None:
        fields["val_fraction"] = config.val_fraction
    return source.settings(**fields)


def prepare(source, work_dir=None, word2vec_vectors=True, glove_source=None, glove_dim=None):
    """Prepares the texts of `source` (and Word2Vec vectors) and prints a summary with
    coverage."""
    started = time.perf_counter()
    prepared = source.prepare(data_settings(source), work_dir, verbose=True)
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
class LabelledData:
    prepared: imdb.PreparedImdb  # or `AugmentedImdb`: its train split has extra rows
    fingerprint: str  # the prepared folder, a hash of its vocabulary, the augmentation
    augmentation: dict = dataclasses.field(default_factory=dict)  # what was added
    encoder: Path | None = None  # `encoder`: the pretrained encoder's folder
    source: object = IMDB  # where the texts came from (`sentiment/sources.py`)


def load_data(config, source=IMDB, work_dir=None):
    """The prepared texts of `source` that `config` trains on, augmented if it says so,
    and their fingerprint, which includes a pretrained encoder's weights."""
    from data_prep import cache

    source.check_augmentation(config.augment)
    prepared = source.prepare(data_settings(source, config), work_dir)
    vocabulary_hash = cache.sha256_of(prepared.directory / "vocabulary.txt")[:12]
    fingerprint = f"{prepared.directory.name}:{vocabulary_hash}"
    folder = None
    if getattr(config, "encoder", None):  # its weights are part of what a run trains on
        from data_prep import encoders

        folder = encoders.encoder_folder(config.encoder, work_dir)
        fingerprint += ":encoder-" + encoders.encoder_digest(folder, work_dir)[:16]
    if config.augment == "none":
        return LabelledData(prepared, fingerprint, encoder=folder, source=source)
    from workflows.sentiment import augmentation

    added = augmentation.augment(config, prepared, work_dir)
    return LabelledData(augmentation.AugmentedImdb(prepared, added),
                        f"{fingerprint}:{added.name}", added.summary, folder, source)


def data_source(args):
    """The source of a step's data flags (`sentiment/sources.py`)."""
    place = CLI.data_place(args)
    return source_of(place.options, place.path)


def check_training_data(args):
    """A train step's data flags, checked before any config is completed from other
    runs (round-trip translators) or any data is read."""
    from workflows.core.step_inputs import overrides_from_args

    text_classes.files_of(args)  # a split's file without --texts is refused
    augment = getattr(args, "augment", None) or overrides_from_args(args).get("augment")
    data_source(args).check_augmentation(augment)


def augment(config, source, work_dir=None):
    """`augment`: makes (or finds) the augmented train rows `config` trains on, ahead of
    `train`, and prints a few with the texts they came from."""
    from workflows.sentiment import augmentation

    if config.augment == "none":
        raise ConfigError("Say which augmentation: --augment round_trip (paraphrases by "
                          "the translation lesson's translators) or --augment edit.")
    data = load_data(config, source, work_dir)
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
    exported = ("workflows.sentiment.exported", "classifier")  # the export step's network
    compare_columns = ("run_id", "params.model", "params.embedding", "params.epochs",
                       "params.batch_size", "params.learning_rate",
                       "metrics.best_val_accuracy", "metrics.test_accuracy",
                       "metrics.test_macro_f1", "metrics.test_roc_auc",
                       "metrics.mean_epoch_seconds", "start_time")
    sort_by = "metrics.test_accuracy"

    def complete_config(self, config):
        return complete_config(config)

    def load_data(self, config, place):
        return load_data(config, source_of(place.options, place.path), place.work_dir)

    def datasets(self, config, data, place):
        added = f" + {config.augment}" if data.augmentation else ""
        return [RunDataset(f"{data.source.corpus} {split}{added if split == 'train' else ''}",
                           dataset_digest(data.fingerprint, split),
                           str(data.prepared.directory), context,
                           len(data.prepared.labels(split)))
                for split, context in (("train", "training"), ("val", "validation"))]

    def build(self, config, data, place):
        trainable = family(config.model).build(config, data)
        added = {key: value for key, value in data.augmentation.items()
                 if isinstance(value, (int, float))}
        return Built(trainable.model, trainable, params=data.source.params(data.prepared),
                     tags=trainable.tags,
                     artifacts={**trainable.artifacts, **({"augmentation.json":
                                data.augmentation} if data.augmentation else {})},
                     metrics={**trainable.metrics, **added})

    def fit(self, training, config, data, built):
        from workflows.core.stopping import Monitor

        trainable = built.parts
        monitor = Monitor(config.monitor, higher_is_better=config.monitor != "val_loss")
        training.fit(trainable.train_batches, trainable.validation_batches,
                     trainable.train_examples, monitor=monitor)

    def export(self, config, data, built):
        from workflows.sentiment.text_classifier import calibrated

        source = data.source
        return ModelExport("classifier", calibrated(built.parts.classifier, data.prepared,
                                                    source.answers), PYFUNC_FILE,
                           source.examples(data.prepared)[:1],
                           packages=("sentiment", "causal_lm"),
                           requirements=("gensim",) if config.model == "doc2vec" else ())


LESSON = SentimentLesson()


# ## Evaluate and use the model
# Both go through the logged pyfunc model, so they test exactly what users load.


def evaluate(run_id=None, imdb_path=None, work_dir=None, model_uri=None, top_wrong=20,
             texts_file=None, text_column=None, label_column=None):
    """Metrics of a run's model on the test split of the texts it trained on, or on the
    labelled texts of `texts_file` (see `data_prep.labelled_texts`), printed and logged
    back to that run.

    Metric names start with `test_`, or with `texts_<file stem>_`, so one run holds
    its scores on several files.
    """
    from data_prep import cache
    from workflows.core import models, runs, tracking
    from workflows.sentiment import evaluation

    run = runs.model_run(LESSON, run_id, model_uri)
    source, classes = source_of_run(run, imdb_path), classes_of_run(run)
    model = models.load_pyfunc(run)
    if texts_file:
        texts, labels = scored_texts(texts_file, text_column, label_column,
                                     classes if source.answers == "classes" else None)
        name = "texts_" + re.sub(r"[^0-9a-zA-Z]+", "_", Path(texts_file).stem).strip("_").lower()
        file = {"file": str(texts_file), "sha256": cache.sha256_of(texts_file)}
        scored_on = RunDataset(Path(texts_file).name, file["sha256"][:12], str(texts_file),
                               "test", len(texts))
    else:  # an ensemble has no config: its members' validation share
        config = runs.config_of(LESSON, run) if run.data.params.get("model") in \
            CATALOG.models else None
        prepared = trained_on(run, source, config, work_dir)
        texts, labels, name, file = prepared.texts("test"), prepared.labels("test"), "test", {}
        scored_on = RunDataset(f"{source.corpus} test",
                               dataset_digest(prepared.directory.name, name),
                               str(prepared.directory), "test", len(texts))
    tracking.log_datasets([scored_on], run.info.run_id)
    return evaluation.score_and_log(run, model, (texts, labels, name, file), classes,
                                    top_wrong)


def trained_on(run, source, config, work_dir=None):
    """The prepared texts of `source` that `run` trained on (`config`'s settings, or the
    validation share it logged), refused in one line where their test split is not the
    one it held out (`check_test_split`)."""
    settings = data_settings(source, config) if config else source.settings(
        val_fraction=float(run.data.params.get("val_fraction",
                                               source.settings().val_fraction)))
    prepared = source.prepare(settings, work_dir)
    source.check_test_split(run, prepared)
    return prepared


def check_reviews(texts):
    """Refuses no reviews, or a review with no words to judge."""
    check_texts(texts, "review")
    blank = [i for i, text in enumerate(texts) if isinstance(text, str) and not text.strip()]
    if blank:
        raise ConfigError(f"Review {blank[0] + 1} is empty: a review needs words to be judged.")


def predict(texts, run_id=None, model_uri=None, top=3):
    """Label and probability for each text, printed (a user's classes: the `top` most
    probable); returns the model's answers."""
    from workflows.core import models, runs

    check_reviews(texts)
    run = runs.model_run(LESSON, run_id, model_uri)
    answers = models.load_pyfunc(run).predict(list(texts))
    for text, answer in zip(texts, answers, strict=True):
        preview = " ".join(text.split())
        preview = preview if len(preview) <= 70 else preview[:67] + "..."
        if isinstance(answer, dict):  # a user's classes
            ranked = sorted(answer["probabilities"].items(), key=lambda item: -item[1])[:top]
            print("  ".join(f"{label} {p:.3f}" for label, p in ranked) + f"  {preview}")
            continue
        label = "positive" if answer >= 0.5 else "negative"
        print(f"{label:8}  {answer:.3f}  {preview}")
    return answers


def ensemble(run_ids, imdb_path=None, work_dir=None, lexicon="none", fit_on="reviews",
             calibrate_on=None, text_column=None, label_column=None, class_weight="none"):
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

    return ensemble_run.ensemble(
        EXPERIMENT, run_ids, lambda members: validation_texts(members, imdb_path, work_dir),
        EXAMPLES[:1], lexicon, fit_on, calibration_texts, class_weight)


def compare(sort_by=None, model=None, since=None, style="text", ascending=False):
    """Prints this lesson's runs as a table, best first; returns the rows."""
    from workflows.core import runs

    return runs.compare(LESSON, sort_by, model, since, style, ascending)


# ## Command line


def leaderboard_plan(args, configs, prepared):
    """`run` on a user's texts with no --model: the pretrained encoder only if it can be
    had and fits the budget (`leaderboard_models`)."""
    if not data_source(args).leaderboard or args.model:
        return configs
    models, left_out = leaderboard_models(prepared.texts("train"), configs[0].max_train_minutes,
                                          lambda: encoder_missing(args, args.work_dir))
    if left_out:
        print(f"Leaving out the pretrained encoder: {left_out}.")
    return [config for config in configs if config.model in models]


def leaderboard_share(args, config, index, count, evaluation_seconds):
    """A leaderboard's model trains on its share of the whole command's
    `--max-train-minutes` (`leaderboard_budget`), then an ensemble of them."""
    if not data_source(args).leaderboard or not config.max_train_minutes:
        return config
    return dataclasses.replace(config, max_train_minutes=leaderboard_budget(
        config.max_train_minutes, index, count, evaluation_seconds, then_ensemble=count > 1))


def leaderboard_end(args, board):
    """IMDB: the runs compared; a user's texts: their ensemble, then the leaderboard and
    the run to use."""
    from workflows.core import runs

    if not data_source(args).leaderboard:
        compare()
        return
    if len(board) > 1:
        began = time.perf_counter()
        run_id = ensemble([row.run_id for row in board], args.imdb_path, args.work_dir)
        board.append(Trained("ensemble", evaluate(run_id, args.imdb_path, args.work_dir),
                             (time.perf_counter() - began) / 60, run_id))
    print_leaderboard([(*row, validation_score(runs.stored_run(row.run_id))) for row in board])


CLI = LessonCLI(LESSON, "workflows.imdb_sentiment", __doc__.split("\n")[0], imdb.ACL_IMDB,
                shortcuts=("batch_size", "glove", "glove_dim", "init_from",
                           "fine_tune_embeddings", "augment", "translator", "back_translator",
                           "class_weight", "encoder"),
                switches=("fine_tune_embeddings",),
                data_options=TEXTS_OPTIONS, data_arguments=text_classes.add_texts_arguments)
_prepare = CLI.step("prepare", "prepare reviews (or --texts), vocabulary and embeddings",
                    lambda a: prepare(data_source(a), a.work_dir, not a.skip_word2vec,
                                      a.glove, a.glove_dim),
                    data=True)
_prepare.add_argument("--glove", help="GloVe .txt/.zip or gensim .kv file")
_prepare.add_argument("--glove-dim", type=int, help="dimension to read from glove.6B.zip")
_prepare.add_argument("--skip-word2vec", action="store_true",
                      help="do not train the Word2Vec vectors (about 5 min, once)")
CLI.step("augment", "make the augmented train rows a config trains on (train makes them "
         "too): --augment round_trip or edit", lambda a: augment(
             CLI.configs(a)[0], data_source(a), a.work_dir),
         data=True, train="config", check=check_training_data)
CLI.step("train", "train one model (resumes an interrupted run)", CLI.train, data=True,
         train="one", check=check_training_data)
add_whole_lesson(CLI, "prepare, train, evaluate and predict, for each --model (default: bow "
                 "and bilstm_glove; with --texts bow, nbsvm, bilstm and the pretrained encoder "
                 "if the budget allows, then their ensemble and the run to use)", WholeLesson(
    configs=lambda a: CLI.configs(a, a.model or list(data_source(a).models)),
    prepare=lambda a, configs: prepare(
        data_source(a), a.work_dir, any(getattr(c, "embedding", "") == "word2vec"
                                        for c in configs), a.glove, a.glove_dim),
    evaluate=lambda a, run_id: evaluate(run_id, a.imdb_path, a.work_dir),
    use=lambda a, config, run_id, prepared: predict(data_source(a).examples(prepared), run_id),
    plan=leaderboard_plan, budget=leaderboard_share, finish=leaderboard_end),
    train="many", check=check_training_data)
_evaluate = CLI.step(
    "evaluate", "metrics of a run on its test split (or on --texts), logged to it",
    lambda a: evaluate(a.run_id, a.imdb_path, a.work_dir, a.model_uri, texts_file=a.texts,
                       text_column=a.text_column, label_column=a.label_column),
    data="source", model=True)
_evaluate.add_argument("--texts", metavar="FILE", help="labelled texts to score instead of "
                       "the run's test split: text<TAB>label per line (after a header line "
                       "if it names the columns), or a .csv or .jsonl file; labels 1/0, "
                       "pos/neg or positive/negative, or the classes of a run trained on "
                       "your texts")
_evaluate.add_argument("--text-column", help="the column of the texts, in a file with a "
                       "header (default: text, review, sentence or content)")
_evaluate.add_argument("--label-column", help="the column of the labels, in a file with a "
                       "header (default: label, sentiment, class or category)")
CLI.step("predict", "classify reviews with a run's model", lambda a: predict(
    read_texts(a.texts, a.file, "reviews to classify"), a.run_id, a.model_uri), model=True,
    texts="reviews to classify",
    check=lambda a: check_reviews(read_texts(a.texts, a.file, "reviews to classify")))
_ensemble = CLI.step("ensemble", "combine the models of several runs (weights fitted on the "
                     "validation reviews)", lambda a: ensemble(
                         a.run_id, a.imdb_path, a.work_dir, a.lexicon, a.fit_on,
                         a.calibrate_on, a.text_column, a.label_column, a.class_weight),
                     data="source")
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
_ensemble.add_argument("--class-weight", choices=CLASS_WEIGHTS, default="none",
                       help="members of your own classes: weigh each validation text in the "
                            "fit as --set class_weight does (balanced: a rare class counts "
                            "as much as a common one)")
CLI.shared_steps()
main = CLI.main

if __name__ == "__main__":
    run_main(main)
