"""Where a metric sits in the MLflow UI, so that a run's charts open on its scores.

MLflow groups a run's charts into sections by the prefix before `/`. Its chart views
(a run's "Model metrics" tab, the runs' chart view) put each prefix's section first,
sorted by name, then the metrics without a prefix ("Model metrics"), then `system/`
("System metrics", which a run's page shows in a tab of its own). A `timing/` section
would come before the losses. So the losses, the scores and how the training went
(`best_epoch`, `learning_rate`, `embedding_coverage`) keep their plain names, and the
timings (durations, rates, shares of time and what compiled: `epoch_seconds`,
`train_minutes`, `examples_per_second`, `training_share`, `train_step_programs`) are
logged under `system/`, beside MLflow's own samples of the machine (CPU, memory, GPU).

Everything logs through `grouped`; whatever reads a run's metrics by name reads
through `ungrouped` (or `ungrouped_columns`), so runs logged before the timings moved
read the same as new ones.
"""

TIMINGS = "system/"
TIMING_ENDINGS = ("_seconds", "_minutes", "_per_second", "_per_sentence", "training_share",
                  "_programs", "compile_cache_hits")


def is_timing(name):
    """Whether the plain metric `name` is a duration, a rate or a count of compilations."""
    return name.endswith(TIMING_ENDINGS) or name.startswith("seconds_")


def grouped_name(name):
    """`name` as it is logged: a timing under `system/`, any other metric as it is."""
    return TIMINGS + name if "/" not in name and is_timing(name) else name


def grouped(metrics):
    """The metrics `{name: value}` under the names they are logged with."""
    return {grouped_name(name): value for name, value in metrics.items()}


def ungrouped_name(name):
    """A logged metric's plain name (MLflow's own `system/` samples keep theirs)."""
    plain = name.removeprefix(TIMINGS)
    return plain if plain != name and "/" not in plain and is_timing(plain) else name


def ungrouped(metrics):
    """A run's logged metrics by their plain names, whichever way the run logged them."""
    return {ungrouped_name(name): value for name, value in metrics.items()}


def ungrouped_columns(frame):
    """A `mlflow.search_runs` frame whose `metrics.system/<timing>` columns are read as
    `metrics.<timing>` too (filled in where a run logged the plain name)."""
    for column in list(frame.columns):
        if not column.startswith("metrics."):
            continue
        plain = "metrics." + ungrouped_name(column.removeprefix("metrics."))
        if plain != column:
            frame[plain] = frame[column].combine_first(frame[plain]) if plain in frame \
                else frame[column]
    return frame
