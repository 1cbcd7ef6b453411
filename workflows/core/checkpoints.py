"""Resumable training: checkpoints every epoch and every N batches, early stopping, resume.

Keras' `BackupAndRestore` restarts an interrupted epoch from its beginning and
forgets the early-stopping state. Here the loop owns the epochs: each epoch is one
`fit` call over that epoch's (seeded) batches, so an interrupted run reloads the
weights and optimizer state, skips the batches it already trained on, and carries
on with the same early-stopping counters and metric history.
"""

import errno
import json
import math
import os
import shutil
import time
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import keras
import numpy as np

from data_prep.cache import sha256_of

STATE_FILE = "state.json"
PREVIOUS_STATE_FILE = "state.previous.json"  # the state of the checkpoint before
# Batches of unknown count (bucketing) end each one-epoch `fit` this way; it is expected.
warnings.filterwarnings("ignore", message="Your input ran out of data")
BEST_WEIGHTS = "best.weights.h5"


@dataclass
class TrainingState:
    """What a run folder records about its training, saved after every checkpoint."""

    epoch: int = 0  # completed epochs
    step: int = 0  # batches already trained in the current epoch
    checkpoint: str = ""  # weights + optimizer file of this state
    history: list = field(default_factory=list)  # metrics of each completed epoch
    best_val_loss: float = math.inf
    best_epoch: int = 0
    epochs_without_improvement: int = 0
    run_id: str = ""
    train_seconds: float = 0.0  # fit time of all epochs (and partial epochs) so far
    finished: bool = False  # trained, summarized and the model logged: nothing left to do
    digests: dict = field(default_factory=dict)  # weights file -> SHA-256 when written


class TrainingFolder:
    """A run's folder: `state.json`, the latest checkpoint and the best weights.

    With several processes, only the chief writes the folder: the others read it (the
    state and checkpoint they resume from, the weights they end with) but write their
    copies, which saving weights makes them produce in step, to `writes_to`, a scratch
    folder of their own. `barrier(name)` waits for every process (see `synchronize`).
    """

    def __init__(self, directory, writes_to=None, barrier=None):
        self.directory = Path(directory)
        self.output = Path(writes_to or directory)
        self.barrier = barrier

    def synchronize(self, name):
        """Before reading what another process wrote: waits until every process is here."""
        if self.barrier:
            self.barrier(name)

    def load_state(self):
        """The saved state; if `state.json` is unreadable, the one before it (said so)."""
        for name in (STATE_FILE, PREVIOUS_STATE_FILE):
            path = self.directory / name
            if not path.exists():
                continue
            try:
                return TrainingState(**json.loads(path.read_text()))
            except (ValueError, TypeError) as error:
                print(f"{path} is damaged ({error}); trying the state before it.", flush=True)
        return TrainingState()

    def save_state(self, state):
        self.output.mkdir(parents=True, exist_ok=True)
        _replace_atomically(self.output / STATE_FILE,
                            lambda tmp: tmp.write_text(json.dumps(asdict(state), indent=2)))

    def checkpoint(self, model, state):
        """Writes a new weights file (its digest into the state), then the state naming
        it; the state before it and its file are kept, to fall back on if the newest is
        found damaged. A crash at any point leaves a state whose checkpoint is complete."""
        self.output.mkdir(parents=True, exist_ok=True)
        state.checkpoint = f"checkpoint-e{state.epoch}-s{state.step}.weights.h5"
        state.digests[state.checkpoint] = _replace_atomically(
            self.output / state.checkpoint, lambda tmp: save_weights(model, tmp))
        current = self.output / STATE_FILE
        if current.exists():
            os.replace(current, self.output / PREVIOUS_STATE_FILE)
        previous = self._previous_state()
        state.digests = {name: digest for name, digest in state.digests.items()
                         if not name.startswith("checkpoint-")
                         or name in (state.checkpoint, previous.checkpoint)}
        self.save_state(state)
        for path in self.output.glob("checkpoint-*.weights.h5"):
            if path.name not in (state.checkpoint, previous.checkpoint):
                path.unlink(missing_ok=True)

    def _previous_state(self, folder=None):
        """The state before the newest (a fresh one if it is missing or unreadable)."""
        path = (folder or self.output) / PREVIOUS_STATE_FILE
        try:
            return TrainingState(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return TrainingState()

    def can_resume(self, state):
        """Whether `state`'s checkpoint, or the one before it, is intact (by its
        recorded digest); True when there is nothing to resume from."""
        if not state.checkpoint or self.problem_with(state.checkpoint, state) is None:
            return True
        before = self._previous_state(self.directory)
        return bool(before.checkpoint) and self.problem_with(before.checkpoint, before) is None

    def mark_finished(self, state):
        """Records that the run is complete; call it after the model is logged."""
        state.finished = True
        self.save_state(state)

    def restore(self, model, state):
        """Loads the state's checkpoint and returns the state to go on from: if that
        checkpoint is missing or damaged (said so), the one before it, else a fresh
        start of the training (said so too)."""
        if not state.checkpoint:
            return state
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        problem = self.load_weights(model, state.checkpoint, state)
        if problem is None:
            return state
        before = self._previous_state(self.directory)
        if before.checkpoint and self.load_weights(model, before.checkpoint, before) is None:
            print(f"Checkpoint {state.checkpoint} {problem}: resuming from the one before "
                  f"it (epoch {before.epoch + 1}, after batch {before.step}).", flush=True)
            return before
        print(f"Checkpoint {state.checkpoint} {problem} and no earlier one is intact: "
              "training this run again from its first epoch.", flush=True)
        return TrainingState(run_id=state.run_id)

    def problem_with(self, name, state):
        """What is wrong with weights file `name`: missing, or not the bytes whose digest
        `state` recorded (None if neither)."""
        path = self.directory / name
        if not path.is_file():
            return "is missing"
        recorded = state.digests.get(name)
        if recorded is not None and sha256_of(path) != recorded:
            return "is damaged (its contents changed since it was written)"
        return None

    def load_weights(self, model, name, state):
        """Loads weights file `name` if it is intact; returns None, or what is wrong."""
        problem = self.problem_with(name, state)
        if problem is not None:
            return problem
        path = self.directory / name
        try:
            model.load_weights(path)
        except (OSError, ValueError, KeyError) as error:  # e.g. h5py on a truncated file
            return f"cannot be read ({type(error).__name__}: {error})"
        return None

    @property
    def best_weights(self):
        return self.directory / BEST_WEIGHTS

    def save_best_weights(self, model, state):
        state.digests[BEST_WEIGHTS] = _replace_atomically(
            self.output / BEST_WEIGHTS, lambda tmp: save_weights(model, tmp))

    def load_best_weights(self, model, state):
        """Gives `model` the best epoch's weights; if their file is damaged, says so and
        leaves the model as it is (the latest checkpoint's weights). Returns whether
        the best weights were loaded."""
        if not self.best_weights.exists():
            return False
        problem = self.load_weights(model, BEST_WEIGHTS, state)
        if problem is None:
            return True
        print(f"{self.best_weights} {problem}: keeping the weights of the latest checkpoint "
              f"(epoch {state.epoch}) instead of the best epoch's.", flush=True)
        if state.checkpoint:
            self.load_weights(model, state.checkpoint, state)
        return False

    def epoch_weights(self, epoch):
        """The weights at the end of `epoch` (1-based), kept for checkpoint averaging."""
        return self.directory / _epoch_file(epoch)

    def save_epoch_weights(self, model, epoch, keep, state):
        """Saves `epoch`'s weights and drops those older than the last `keep` epochs."""
        state.digests[_epoch_file(epoch)] = _replace_atomically(
            self.output / _epoch_file(epoch), lambda tmp: save_weights(model, tmp))
        for path in self.output.glob("epoch-*.weights.h5"):
            if int(path.name.split("-")[1].split(".")[0]) <= epoch - keep:
                path.unlink(missing_ok=True)
                state.digests.pop(path.name, None)

    def intact_epoch_weights(self, epochs, state):
        """Those of `epochs` whose weights file exists and matches its digest."""
        return [epoch for epoch in epochs
                if self.problem_with(_epoch_file(epoch), state) is None]


def _epoch_file(epoch):
    return f"epoch-{epoch}.weights.h5"


def average_weights(model, paths):
    """Loads into `model` the mean of the weight files `paths` (checkpoint averaging).

    Floating-point variables are averaged; others (e.g. seed-generator states) keep the
    last file's values.
    """
    sums = None
    for path in paths:
        model.load_weights(path)
        values = [keras.ops.convert_to_numpy(variable.value) for variable in model.weights]
        sums = [value.astype("float64") for value in values] if sums is None else \
            [total + value for total, value in zip(sums, values, strict=True)]
    for variable, total, last in zip(model.weights, sums, values, strict=True):
        if "float" in str(variable.dtype):
            variable.assign((total / len(paths)).astype(last.dtype))


def starting_state(folder, retrain=False):
    """The run folder's saved state; with `retrain`, the folder is wiped first."""
    if retrain and Path(folder).exists():
        shutil.rmtree(folder)
    return TrainingFolder(folder).load_state()


def save_weights(model, path):
    """`model.save_weights(path)`, refused with ENOSPC (before a byte is written) when
    the disk has not room for them: HDF5 failing mid-file floods stderr and can crash."""
    variables = [*model.weights, *(model.optimizer.variables if model.optimizer else [])]
    needed = sum(np.prod(v.shape, dtype="int64") * np.dtype(v.dtype).itemsize
                 for v in variables) * 1.1 + (1 << 20)
    free = shutil.disk_usage(path.parent).free
    if free < needed:
        raise OSError(errno.ENOSPC, f"No space left on device for {needed / 2**20:.0f} MB "
                                    f"of weights ({free / 2**20:.0f} MB free)", str(path))
    model.save_weights(path)


def _replace_atomically(path, write):
    """`write(tmp)` to a fresh temporary sibling, then rename it over `path`; returns
    the SHA-256 of what was written.

    Each write has its own temporary name: a save interrupted by Ctrl-C may still hold
    its file open while the interrupt handler writes the checkpoint again.
    """
    tmp = path.with_name(f".partial-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        write(tmp)
        digest = sha256_of(tmp)
        os.replace(tmp, path)
        return digest
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_partial_files(folder):
    """Temporary files left by a killed trainer (call while no other process trains here)."""
    for partial in Path(folder).glob(".partial-*"):
        partial.unlink(missing_ok=True)


class _BatchCheckpoint(keras.callbacks.Callback):
    """Checkpoints every `every` batches and remembers the last finished batch; `seconds`
    is the time its checkpoints took."""

    def __init__(self, folder, state, every):
        super().__init__()
        self.folder, self.state, self.every = folder, state, every
        self.first_step, self.seconds = state.step, 0.0

    def on_train_batch_end(self, batch, logs=None):
        self.state.step = self.first_step + batch + 1
        if self.every and self.state.step % self.every == 0:
            started = time.perf_counter()
            self.folder.checkpoint(self.model, self.state)
            self.seconds += time.perf_counter() - started


class _EpochTimer(keras.callbacks.Callback):
    """Seconds one `fit` epoch spent on its training batches and on validation."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started, self.training, self.validation = time.perf_counter(), None, 0.0

    def on_test_begin(self, logs=None):
        self.validation_started = time.perf_counter()
        if self.training is None:
            self.training = self.validation_started - self.started

    def on_test_end(self, logs=None):
        self.validation += time.perf_counter() - self.validation_started

    def on_epoch_end(self, epoch, logs=None):
        if self.training is None:  # no validation data
            self.training = time.perf_counter() - self.started


def fit_resumably(model, epoch_dataset, validation_data, folder, epochs, patience=2,
                  checkpoint_every_steps=200, train_examples=None, on_epoch_end=None,
                  callbacks=(), verbose="auto", time_budget_seconds=None, epoch_metrics=None,
                  keep_epoch_weights=0, agree=bool, monitor="val_loss", higher_is_better=False):
    """Trains `model` for up to `epochs`, resuming from `folder` (a path or a
    `TrainingFolder`) if it holds a checkpoint.

    `epoch_dataset(epoch)` returns that epoch's batches, the same ones on every call
    (seed the shuffle with the epoch) so a resumed epoch skips exactly what was done.
    Stops after `patience` epochs without a lower validation loss (or a better
    `monitor`, an epoch metric, higher or lower as `higher_is_better` says) and leaves
    the model with its best weights. `epoch_metrics(epoch, metrics)` may add to an epoch's
    metrics (plus `epoch_seconds`, the training batches' time, and `examples_per_second`
    for uninterrupted epochs; `validation_seconds`, `checkpoint_seconds`)
    before they are checkpointed with the state; `on_epoch_end(epoch, metrics)` sees
    them after the checkpoint (a crash in between leaves them in `state.history`, to be
    replayed). `callbacks` are passed to every `fit`. With `time_budget_seconds`, no
    epoch starts that would end past the budget (judged by the slowest epoch so far, the
    first excepted once there are others: it includes compiling the steps;
    training time is summed over resumptions). `keep_epoch_weights`: keep the weights of
    the last that many epochs (`epoch-N.weights.h5`) to average. `agree(flag)` turns
    whether to train another epoch into one decision for every process (the chief's,
    since each times its own epochs). Ctrl-C saves a
    checkpoint before re-raising. Returns the final state, not yet marked finished: the
    caller does that once its end-of-run work is done, so a crash there is redone by a rerun, which
    finds no epoch left to train.
    """
    folder = folder if isinstance(folder, TrainingFolder) else TrainingFolder(folder)
    folder.output.mkdir(parents=True, exist_ok=True)
    state = folder.restore(model, folder.load_state())
    while agree(state.epoch < epochs and state.epochs_without_improvement < patience
                and _within_budget(state, time_budget_seconds)):
        resumed_at = state.step
        print(f"Epoch {state.epoch + 1}/{epochs}"
              + (f" (resuming after batch {resumed_at})" if resumed_at else ""), flush=True)
        dataset = epoch_dataset(state.epoch)
        if resumed_at:
            dataset = dataset.skip(resumed_at)
        started = time.perf_counter()
        timer, checkpoints = _EpochTimer(), _BatchCheckpoint(folder, state,
                                                             checkpoint_every_steps)
        try:
            logs = model.fit(dataset, validation_data=validation_data, epochs=1, verbose=verbose,
                             shuffle=False, callbacks=[checkpoints, timer, *callbacks])
        except KeyboardInterrupt:
            state.train_seconds += time.perf_counter() - started
            folder.checkpoint(model, state)
            print(f"\nInterrupted: checkpoint saved after batch {state.step} of epoch "
                  f"{state.epoch + 1}. Rerun the same command to resume.", flush=True)
            raise
        metrics = {name: float(values[-1]) for name, values in logs.history.items()}
        state.train_seconds += time.perf_counter() - started
        if not resumed_at:
            metrics["epoch_seconds"] = timer.training - checkpoints.seconds
            if train_examples:
                metrics["examples_per_second"] = train_examples / metrics["epoch_seconds"]
        metrics.update(validation_seconds=timer.validation,
                       checkpoint_seconds=checkpoints.seconds)
        if epoch_metrics:
            epoch_metrics(state.epoch, metrics)
        if not resumed_at:  # the whole epoch, the lesson's own epoch-end work included
            metrics["epoch_wall_seconds"] = time.perf_counter() - started
        _update_early_stopping(model, folder, state, metrics, monitor, higher_is_better)
        state.history.append(metrics)
        state.epoch, state.step = state.epoch + 1, 0
        if keep_epoch_weights:  # before the state: an epoch done is an epoch kept
            folder.save_epoch_weights(model, state.epoch, keep_epoch_weights, state)
        folder.checkpoint(model, state)
        if on_epoch_end:
            on_epoch_end(state.epoch - 1, metrics)
    folder.synchronize("trained")
    folder.load_best_weights(model, state)
    return state


def _within_budget(state, budget):
    if budget is None:
        return True
    durations = [epoch.get("epoch_wall_seconds", epoch.get("epoch_seconds", 0.0))
                 for epoch in state.history]
    # the first epoch includes compiling the steps (minutes for a large model on a GPU)
    slowest = max(durations[1:] or durations, default=0.0)
    if state.train_seconds + slowest <= budget:
        return True
    print(f"Stopping: {state.train_seconds / 60:.1f} of {budget / 60:.1f} training minutes "
          "used; another epoch would not fit.", flush=True)
    return False


def _update_early_stopping(model, folder, state, metrics, monitor, higher_is_better):
    """`state.best_val_loss` holds the best value of `monitor`, lower is better (a
    metric where higher is better is kept negated)."""
    value = metrics.get(monitor, metrics.get("loss"))
    value = -value if higher_is_better else value
    if value < state.best_val_loss:
        state.best_val_loss, state.best_epoch = value, state.epoch + 1
        state.epochs_without_improvement = 0
        folder.save_best_weights(model, state)
    else:
        state.epochs_without_improvement += 1
