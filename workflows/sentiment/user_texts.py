"""A user's labelled texts in the sentiment lesson: a labelled file scored against a
run's classes, and the leaderboard of `run --texts`."""

import numpy as np


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


# ## What `run --texts` trains by default, and which run it says to use

TEXTS_FAMILIES = ("bow", "nbsvm", "bilstm")  # then the pretrained encoder, if it fits
# all-MiniLM-L6-v2 fine-tuned on 2 CPU cores: about 1,100 WordPiece tokens a second
# (benchmarks/results/encoder_imdb.json: 40,032 rows of at most 128 tokens in 48.5 min)
ENCODER_TOKENS_PER_SECOND = 1100


def encoder_epoch_minutes(texts, max_tokens=128, slices=1):
    """About how long one epoch of the `encoder` family takes on `texts` (each read as
    up to `max_tokens` WordPiece tokens, about 1.3 a word, and `slices` sentence slices
    of it) on 2 CPU cores."""
    tokens = sum(min(int(1.3 * len(text.split())) + 2, max_tokens) for text in texts)
    return tokens * (1 + slices * 0.3) / ENCODER_TOKENS_PER_SECOND / 60


def leaderboard_models(train_texts, minutes, encoder_ready):
    """The families `run --texts` trains, and why the encoder is left out (or None):
    the kit's three, then the pretrained encoder (it trains last, so it has what the
    others leave of `minutes`) unless its weights cannot be had (`encoder_ready()`: None,
    or why not) or half the budget is less than about one epoch of it."""
    why_not = encoder_ready()
    if why_not is None and minutes:
        needed = encoder_epoch_minutes(train_texts)
        if needed > minutes / 2:
            why_not = (f"one epoch of it takes about {needed:.1f} minutes here, more than "
                       f"half of --max-train-minutes {minutes:g}")
    return list(TEXTS_FAMILIES) + ([] if why_not else ["encoder"]), why_not


def encoder_missing(args, work_dir=None):
    """Why the pretrained encoder `run --texts` would add cannot be had (its weights
    neither cached nor fetchable), or None: the one `--encoder` (or `--set encoder=`)
    names, or the family's default, fetched once, here."""
    from data_prep import encoders
    from process.errors import UserError
    from workflows.core.step_inputs import overrides_from_args
    from workflows.sentiment.encoder import MODELS

    name = getattr(args, "encoder", None) or overrides_from_args(args).get("encoder") \
        or MODELS["encoder"].encoder
    try:
        encoders.encoder_folder(name, work_dir)
    except UserError as error:
        return str(error)
    return None


def validation_score(run):
    """The macro-F1 a run scores on validation texts it was not fitted on: a member's
    best epoch's, an ensemble's cross-validated stacking's."""
    metrics = run.data.metrics
    return metrics.get("crossval_val_macro_f1", metrics.get("best_val_macro_f1"))


def print_leaderboard(board):
    """The runs of `run --texts`, best validation macro-F1 first, then the one to use
    and why: the best validation score (the test split only reports)."""
    board = sorted(board, key=lambda row: -(row[4] if row[4] is not None else -1))
    print(f"\n{'model':16} {'val F1':>8} {'macro-F1':>8} {'accuracy':>8} {'minutes':>8}"
          "  run id")
    for model, metrics, minutes, run_id, validation in board:
        shown = "-" if validation is None else f"{validation:.4f}"
        print(f"{model:16} {shown:>8} {metrics['macro_f1']:8.4f} {metrics['accuracy']:8.4f} "
              f"{minutes:8.1f}  {run_id}")
    model, metrics, minutes, run_id, validation = board[0]
    if validation is None:
        return None
    print(f"\nUse run {run_id} ({model}): the best validation macro-F1 of the {len(board)} "
          f"runs, {validation:.4f} ({minutes:.1f} minutes; test macro-F1 "
          f"{metrics['macro_f1']:.4f}). Serve it: python -m workflows.serve_model "
          f"runs:/{run_id}/model")
    return run_id


def leaderboard_budget(minutes, index, count, evaluation_seconds, then_ensemble=False):
    """The train budget of the `index`-th of `count` models of a leaderboard whose whole
    command has `minutes` (every budget counts from the command's start, so a model that
    stops early leaves the rest its time, and each evaluation is in the next model's):
    its share of what is left after the last model's evaluation and predictions, held
    at twice the slowest measured so far (a tenth of the budget before any), and, if
    `then_ensemble`, after the ensemble's too: every member scored again on the
    validation texts and the ensemble's evaluation (which combines the members' own test
    answers), held at 1.25 times the evaluations, the last one's guessed as above
    (another tenth before any): room also for a last model slower to score than those
    measured."""
    if evaluation_seconds:
        last = 2 * max(evaluation_seconds)
        reserve = last + (1.25 * (sum(evaluation_seconds) + last) if then_ensemble else 0)
        reserve /= 60
    else:
        reserve = (0.2 if then_ensemble else 0.1) * minutes
    return round(max(minutes - reserve, 0.05 * minutes) * (index + 1) / count, 3)
