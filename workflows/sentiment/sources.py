"""Where a sentiment run's labelled texts come from: the IMDB reviews (the classes
`negative` and `positive`) or a user's file of texts and labels (any classes). Both
answer the same questions, so the lesson never asks which one it holds:

- `settings(**fields)`: the prepared-data settings (`ImdbSettings`, `TextsSettings`);
- `prepare(settings, work_dir)`: the prepared texts (`data_prep.imdb.PreparedImdb`);
- `params(prepared)`: what a run logs of them, by which later steps find them again
  (`source_of_run`);
- `corpus`, `answers` (what the served model answers: IMDB's P(positive), the tutorial's
  API, or a user's label and class probabilities) and `examples(prepared)`.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from data_prep import imdb, text_classes
from workflows.core.config import ConfigError
from workflows.sentiment.user_texts import TEXTS_FAMILIES

EXAMPLES = ["A gripping, beautifully shot film.", "Dull, predictable and far too long."]
# the data flags of a user's labelled texts (`data_prep.text_classes.add_texts_arguments`)
TEXTS_OPTIONS = ("texts", "validation_texts", "test_texts", "text_column", "label_column")
FILE_FIELDS = (("texts", "texts"), ("validation", "validation_texts"),
               ("test", "test_texts"), ("text_column", "text_column"),
               ("label_column", "label_column"))


@dataclass(frozen=True)
class ImdbReviews:
    """The IMDB reviews at `path` (None: `$NLPKIT_IMDB_PATH`, the cache, the download);
    their unlabelled reviews feed Word2Vec and Doc2Vec."""

    path: str | None = None
    corpus = "aclImdb"
    answers = "probability"
    models = ("bow", "bilstm_glove")  # what `run` trains by default: the tutorial's pair
    leaderboard = False  # `run` compares them (`compare`)

    def settings(self, **fields):
        return imdb.ImdbSettings(include_unlabelled=True, **fields)

    def prepare(self, settings, work_dir=None, verbose=False):
        return imdb.prepare(self.path, settings, work_dir, verbose)

    def params(self, prepared):
        return {"classes": json.dumps(prepared.classes)}

    def examples(self, prepared):
        return EXAMPLES

    def check_augmentation(self, augment):
        """Every augmentation applies to English reviews."""

    def check_test_split(self, run, prepared):
        """The official test reviews, whatever the settings: always the ones held out."""


@dataclass(frozen=True)
class LabelledFiles:
    """A user's labelled texts (`data_prep.text_classes.TextsFiles`)."""

    files: text_classes.TextsFiles
    answers = "classes"
    # what `run` trains by default (the encoder if the budget allows it), then ranks on
    # a leaderboard with their ensemble, saying which run to use
    models = (*TEXTS_FAMILIES, "encoder")
    leaderboard = True

    @property
    def corpus(self):
        return Path(self.files.texts).name

    def settings(self, **fields):
        return text_classes.TextsSettings(**fields)

    def prepare(self, settings, work_dir=None, verbose=False):
        return text_classes.prepare(self.files, settings, work_dir, verbose)

    def params(self, prepared):
        """The files (absolute paths), the columns given and the classes."""
        return {**{option: str(Path(getattr(self.files, field)).resolve()) if field in (
                   "texts", "validation", "test") else getattr(self.files, field)
                   for field, option in FILE_FIELDS if getattr(self.files, field)},
                "classes": json.dumps(prepared.classes, ensure_ascii=False)}

    def examples(self, prepared):
        return [text[:500] for text in prepared.texts("val")[:3]]

    def check_augmentation(self, augment):
        """Refuses round-trip paraphrases: the kit's translators read English only."""
        if augment == "round_trip":
            raise ConfigError("--augment round_trip paraphrases English reviews through the "
                              "translation lesson's en-es runs; for your own texts use "
                              "--augment edit.")

    def check_test_split(self, run, prepared):
        """Refuses a file that changed since `run` trained on it: its test split would
        differ from the one held out."""
        trained = run.data.tags.get("dataset_fingerprint", "").split(":")[0]
        if trained and trained != prepared.directory.name:
            raise ConfigError(f"{self.files.texts} changed since run {run.info.run_id[:8]} "
                              "trained on it, so its test split is not the one held out: "
                              "score the run on held-out texts with --texts FILE, or train "
                              "again.")


def source_of(options, imdb_path=None):
    """The source the data flags name (`options`: the `TEXTS_OPTIONS` given): the user's
    labelled texts of `--texts`, else the IMDB reviews."""
    if not options.get("texts"):
        return ImdbReviews(imdb_path)
    return LabelledFiles(text_classes.TextsFiles(**{
        field: options.get(option) for field, option in FILE_FIELDS}))


def source_of_run(run, imdb_path=None):
    """The source a run trained on, from what it logged (`params`)."""
    return source_of(run.data.params, imdb_path)


def classes_of_run(run):
    """The label of each class index of a run's model (IMDB's before runs logged them)."""
    logged = run.data.params.get("classes")
    return json.loads(logged) if logged else list(imdb.CLASSES)


def validation_texts(member_runs, imdb_path=None, work_dir=None):
    """(texts, labels, prepared folder name, params to log) of the validation split the
    runs of an ensemble held out (refused where they held out different shares)."""
    fractions = {float(run.data.params.get("val_fraction", imdb.ImdbSettings.val_fraction))
                 for run in member_runs}
    if len(fractions) > 1:
        raise ConfigError(f"The runs hold out different validation shares ({sorted(fractions)}"
                          "): ensemble runs trained with the same --set val_fraction.")
    fraction = fractions.pop()
    source = source_of_run(member_runs[0], imdb_path)
    prepared = source.prepare(source.settings(val_fraction=fraction), work_dir)
    return (prepared.texts("val"), prepared.labels("val"), prepared.directory.name,
            {"val_fraction": fraction, **source.params(prepared)})
