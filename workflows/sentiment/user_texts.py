"""A user's labelled texts in the sentiment lesson: the data flags as files, what a run
logs of them (so `evaluate` finds its test split again), a labelled file scored against
a run's classes, and the leaderboard of `run --texts`."""

import json
from pathlib import Path

import numpy as np

from data_prep import text_classes
from workflows.core.config import ConfigError


def check_augmentation(augment, files):
    """Refuses round-trip paraphrases of a user's texts: the kit's translators read
    English reviews only."""
    if files is not None and augment == "round_trip":
        raise ConfigError("--augment round_trip paraphrases English reviews through the "
                          "translation lesson's en-es runs; for your own texts use "
                          "--augment edit.")


def texts_files(options):
    """The user's labelled texts the data flags name (`TextsFiles`), or None: IMDB."""
    if not options.get("texts"):
        return None
    return text_classes.TextsFiles(**{field: options.get(option) for field, option in (
        ("texts", "texts"), ("validation", "validation_texts"), ("test", "test_texts"),
        ("text_column", "text_column"), ("label_column", "label_column"))})


def texts_params(data):
    """What a run of a user's texts logs of them: the files (absolute paths), columns and
    classes, by which `evaluate` finds its test split again."""
    if data.files is None:
        return {}
    files = data.files
    given = {"texts": files.texts, "validation_texts": files.validation,
             "test_texts": files.test}
    return {**{key: str(Path(path).resolve()) for key, path in given.items() if path},
            **{key: value for key, value in (("text_column", files.text_column),
                                             ("label_column", files.label_column)) if value},
            "classes": json.dumps(data.prepared.classes, ensure_ascii=False)}


def scored_texts(path, text_column, label_column, classes):
    """(texts, labels) of a labelled file to score: IMDB's binary labels, or the labels
    of a run's `classes` (by name; any other label is refused)."""
    from data_prep.labelled_texts import LabelledTextsError, read_classes, read_labelled_texts

    if classes is None:
        return read_labelled_texts(path, text_column, label_column)
    texts, labels = read_classes(path, text_column, label_column)
    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise LabelledTextsError(f"{path} has labels the model does not know "
                                 f"({', '.join(unknown[:5])}); its classes: "
                                 f"{', '.join(classes)}.")
    index = {label: i for i, label in enumerate(classes)}
    return texts, np.array([index[label] for label in labels], "int32")


def print_leaderboard(board):
    """The runs of `run --texts`, best macro-F1 first."""
    print(f"\n{'model':16} {'macro-F1':>8} {'accuracy':>8} {'minutes':>8}  run id")
    for model, metrics, minutes, run_id in sorted(board, key=lambda row: -row[1]["macro_f1"]):
        print(f"{model:16} {metrics['macro_f1']:8.4f} {metrics['accuracy']:8.4f} "
              f"{minutes:8.1f}  {run_id}")


def leaderboard_budget(minutes, index, count, evaluation_seconds):
    """The train budget of the `index`-th of `count` models of a leaderboard whose whole
    command has `minutes` (every budget counts from the command's start, so a model that
    stops early leaves the rest its time, and each evaluation is in the next model's):
    its share of what is left after the last model's evaluation and predictions, held
    at twice the slowest measured so far (a tenth of the budget before any)."""
    reserve = 2 * max(evaluation_seconds) / 60 if evaluation_seconds else 0.1 * minutes
    return round(max(minutes - reserve, 0.05 * minutes) * (index + 1) / count, 3)
