"""When a training ends (`fit_resumably`'s rules): after its epochs, after `patience`
epochs whose `Monitor` score is no better (the best epoch's weights kept), or when its
wall-time budget, summed over resumptions, would not leave room for the export.
"""

import dataclasses
import time

# kept free of a time budget for the export (at most a tenth of it), beyond what is measured
EXPORT_SECONDS = 30.0


class WallBudget:
    """The wall time `train` may take, from `started` (a `time.monotonic()` reading) and
    over every resumption (`spent` seconds before this one); `reserve` is held back for
    the export and the run's end, and grows with what the epochs' end work measures."""

    def __init__(self, seconds, started=None, spent=0.0):
        self.seconds, self.spent = seconds, spent
        self.started = time.monotonic() if started is None else started
        self.export_seconds = EXPORT_SECONDS if seconds is None else min(EXPORT_SECONDS,
                                                                         0.1 * seconds)
        # until an epoch's end work is measured (its first run compiles), a tenth more
        self.reserve = self.export_seconds + (0 if seconds is None else 0.1 * seconds)
        self.end_work = []  # seconds of each epoch's validation and end work, this run

    def measured_end_work(self, seconds, checkpoint_seconds):
        """The run's end redoes an epoch's end work (averaging), checkpoints and exports;
        `seconds` leaves out compiling, and the first epoch's end work counts until there
        are others."""
        self.end_work.append(seconds)
        self.reserve = (self.export_seconds + 2 * max(self.end_work[1:] or self.end_work)
                        + 2 * checkpoint_seconds)

    def used(self):
        return self.spent + time.monotonic() - self.started

    def exhausted(self):
        return self.seconds is not None and self.used() + self.reserve >= self.seconds

    def fits(self, seconds):
        return self.seconds is None or self.used() + seconds + self.reserve <= self.seconds


@dataclasses.dataclass(frozen=True)
class Monitor:
    """The epoch metric that chooses the best epoch and stops early, and its sense."""

    name: str = "val_loss"
    higher_is_better: bool = False

    def score(self, metrics):
        """The epoch's `metrics` as a score where lower is better (the training `loss`
        where the epoch has no `name`)."""
        value = metrics.get(self.name, metrics.get("loss"))
        return -value if self.higher_is_better else value

    def beats(self, value, best):
        """Whether `value` of the metric beats `best` (nan beats nothing)."""
        return value > best if self.higher_is_better else value < best


VALIDATION_LOSS = Monitor()  # the default: the lowest validation loss is the best epoch


@dataclasses.dataclass(frozen=True)
class Stopping:
    """When a training ends: after `epochs`; after `patience` epochs without a better
    `monitor` (a `Monitor`); or when `budget_seconds` of wall time from `started`
    (default: now) run out, summed over resumptions."""

    epochs: int
    patience: int = 2
    monitor: Monitor = VALIDATION_LOSS
    budget_seconds: float | None = None
    started: float | None = None


def within_budget(state, budget):
    """Whether another epoch fits the budget (the first always starts: its batches end
    when the budget must keep the rest)."""
    if budget.seconds is None or not state.history:
        return True
    # without compiling (minutes for a large model on a GPU, in the first epoch mostly)
    durations = [max(0.0, epoch.get("epoch_wall_seconds", 0.0)
                     - epoch.get("epoch_compile_seconds", 0.0)) for epoch in state.history]
    # the first epoch's warm-up (caches, autotuning) too, once there are others
    slowest = max(durations[1:] or durations, default=0.0)
    if budget.fits(slowest):
        return True
    print(f"Stopping: {budget.used() / 60:.2f} of {budget.seconds / 60:.2f} minutes used; "
          f"another epoch (about {slowest:.0f} s) would not leave {budget.reserve:.0f} s for "
          "the export.", flush=True)
    return False


def update_early_stopping(model, folder, state, metrics, monitor):
    """`state.best_score` holds the best `monitor.score` (lower is better: a metric
    where higher is better is kept negated); so does `state.scores`, per epoch."""
    value = monitor.score(metrics)
    state.scores.append(value)
    if value < state.best_score:
        state.best_score, state.best_epoch = value, state.epoch + 1
        state.epochs_without_improvement = 0
        folder.keep_best_weights(model)
    else:
        state.epochs_without_improvement += 1
