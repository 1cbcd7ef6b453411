"""Where a metric sits in the MLflow UI: the losses and scores a learner compares keep
their names, so a run's charts open on them; the operational figures go under a prefix
that MLflow groups into a section of its own (as it does `system/`):

- `timing/`: durations, rates and shares of time, and what compiled (`epoch_seconds`,
  `train_minutes`, `examples_per_second`, `training_share`, `train_step_programs`);
- `training/`: how the training went (`best_epoch`, `trained_epochs`, `learning_rate`);
- `data/`: what the data and index held (`embedding_coverage`, vocabulary sizes).

Everything logs through `grouped`; everything that reads a run's metrics by name
reads through `ungrouped` (or `ungrouped_columns`), so runs logged before the prefixes
existed read the same as new ones.
"""

TRAINING = frozenset({"best_epoch", "trained_epochs", "learning_rate", "horizon_steps",
                      "hybrid_weight_used"})
DATA = frozenset({"embedding_coverage", "approximate_index", "index_recall_at_10"})
TIMING_ENDINGS = ("_seconds", "_minutes", "_per_second", "_per_sentence", "training_share",
                  "_programs", "compile_cache_hits")
GROUPS = ("timing", "training", "data")


def group_of(name):
    """The section of the metric `name`: a prefix of `GROUPS`, or None for a score."""
    if name in TRAINING:
        return "training"
    if name in DATA or name.endswith("vocabulary_size"):
        return "data"
    if name.endswith(TIMING_ENDINGS) or name.startswith("seconds_"):
        return "timing"
    return None


def grouped_name(name):
    """`name` as it is logged: under its section's prefix (a name with one is kept)."""
    group = None if "/" in name else group_of(name)
    return f"{group}/{name}" if group else name


def grouped(metrics):
    """The metrics `{name: value}` under the names they are logged with."""
    return {grouped_name(name): value for name, value in metrics.items()}


def ungrouped_name(name):
    """A logged metric's name without its section (`system/` metrics keep theirs)."""
    group, _, rest = name.partition("/")
    return rest if group in GROUPS and rest else name


def ungrouped(metrics):
    """A run's logged metrics by their plain names, whichever way the run logged them."""
    return {ungrouped_name(name): value for name, value in metrics.items()}


def ungrouped_columns(frame):
    """A `mlflow.search_runs` frame whose `metrics.<group>/<name>` columns are read as
    `metrics.<name>` too (filled in where a run logged the plain name)."""
    for column in list(frame.columns):
        if not column.startswith("metrics."):
            continue
        plain = "metrics." + ungrouped_name(column.removeprefix("metrics."))
        if plain != column:
            frame[plain] = frame[column].combine_first(frame[plain]) if plain in frame \
                else frame[column]
    return frame
