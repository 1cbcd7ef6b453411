"""Resumable training: checkpoints, stops at any moment, and `stopping.py`'s rules
(`fit_resumably`; `training.py` runs it). An epoch is its training batches (one `fit`
call, resumable after any batch), then its validation and the lesson's epoch-end work.
A stop signal during the batches (or validation's) is handled at the end of the batch
under way, with the model's real weights; elsewhere at once. Either way the command
checkpoints what it has and exits."""

import dataclasses
import functools
import time
import warnings
from collections.abc import Callable

import keras
import numpy as np

from data_prep.pipelines import untuned
from process import stops
from process.stops import ForcedStop, Stop
from workflows.core import compilation
from workflows.core.checkpoints import TrainingFolder
from workflows.core.horizon import ScheduleHorizon
from workflows.core.stopping import WallBudget, update_early_stopping, within_budget

# Batches of unknown count (bucketing) end each one-epoch `fit` this way; it is expected.
warnings.filterwarnings("ignore", message="Your input ran out of data")
CHECKPOINT_EVERY_SECONDS = 600.0  # within an epoch, at the latest (one process)


def started_at():
    """When the command began (`time.monotonic()`), or now outside a command."""
    return stops.command_started or time.monotonic()


# ## One epoch's batches, resumable after any of them

class _BatchGuard(keras.callbacks.Callback):
    """Counts an epoch's batches into the state, checkpoints every `every` of them or
    every `CHECKPOINT_EVERY_SECONDS`, whichever comes first (when due), ends the epoch
    early once the `budget` must keep the rest, and stops at a batch's end when a stop
    signal came (`Stop`). The batches' metrics stay on the device until a checkpoint
    reads them (`epoch_metrics`). It times each batch's call (`first_calls_seconds`)."""

    def __init__(self, folder, state, every, budget, decide=bool, horizon=None):
        super().__init__()
        self.horizon = horizon
        self.folder, self.state, self.every, self.budget = folder, state, every, budget
        self.decide = decide  # one decision for every process (`_decider`)
        self.alone = decide is bool
        self.first_step, self.before = state.step, dict(state.partial)
        self.batches_run, self.logs = 0, {}
        self.checkpoint_seconds, self.last_checkpoint = 0.0, time.perf_counter()
        self.out_of_time = False
        self.saved_at = None  # the step of its last checkpoint
        self.call_seconds, self.called = [], None
        self.first_batch = None  # its `time.monotonic()`

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_batch is None:
            self.first_batch = time.monotonic()
        self.called = time.perf_counter()

    def on_test_batch_begin(self, batch, logs=None):
        self.called = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.call_seconds.append(time.perf_counter() - self.called)
        previous = self.state.step  # (several batches a call with `steps_per_execution`)
        self.batches_run, self.logs = batch + 1, logs or {}
        self.state.step = self.first_step + self.batches_run
        if Stop.requested:
            raise KeyboardInterrupt
        if self.horizon and self.horizon.wants_early_pace:
            self.horizon.early_pace(self.model, self.state, time.perf_counter(), self.batches_run)
        since = time.perf_counter() - self.last_checkpoint
        at_step = self.every and self.state.step // self.every > previous // self.every
        # one process alone checkpoints on time too: with steps of a minute (a CPU), a
        # stop must not lose an hour (several processes decide at common steps only)
        on_time = self.every and self.alone and since >= CHECKPOINT_EVERY_SECONDS
        if (at_step or on_time) and self.decide(self.folder.due(since)):
            started = time.perf_counter()
            self.state.partial = self.epoch_metrics
            self.folder.checkpoint(self.model, self.state)
            self.saved_at, self.last_checkpoint = self.state.step, time.perf_counter()
            self.checkpoint_seconds += self.last_checkpoint - started
        # with several processes, only where they decide together anyway
        if (self.alone or at_step) and self.decide(self.budget.exhausted()):
            self.out_of_time = self.model.stop_training = True

    def on_test_batch_end(self, batch, logs=None):
        self.call_seconds.append(time.perf_counter() - self.called)
        if Stop.requested:
            raise KeyboardInterrupt

    @property
    def first_calls_seconds(self):
        """The batches' time beyond 3 times the median batch's (and a tenth of a second
        more, over a busy machine's jitter): what their first calls spent tracing and
        compiling (a step dispatches without waiting for the device, but compiles before
        it dispatches), on any backend."""
        if not self.call_seconds:
            return 0.0
        median = float(np.median(self.call_seconds))
        usual = max(3 * median, median + 0.1)
        return sum(max(0.0, seconds - usual) for seconds in self.call_seconds)

    @property
    def epoch_metrics(self):
        """The epoch's metrics over its batches so far, the resumed ones included."""
        ran = {name: float(keras.ops.convert_to_numpy(value))
               for name, value in self.logs.items()}
        return _combined(self.before, ran, self.batches_run)


class _CompileAhead(keras.callbacks.Callback):
    """At `fit`'s start: on TensorFlow, the model's optimizer and metrics are built before
    its train step is traced (`compilation.build_before_tracing`); on JAX, every batch
    shape's train and test steps compile at once (`compilation.AheadOfTime`)."""

    def __init__(self, compiler, train_batches, test_batches):
        super().__init__()
        self.compiler, self.batches = compiler, (train_batches, test_batches)

    def on_train_begin(self, logs=None):
        compilation.build_before_tracing(self.model, self.batches[0])
        self.compiler.start(self.model, *self.batches)


def _combined(before, ran, batches):
    """Running means over `before`'s batches and `batches` more (whose means are `ran`)."""
    earlier = before.get("batches", 0)
    total = earlier + batches
    if not total:
        return {}
    names = set(before) | set(ran)
    names.discard("batches")
    return {"batches": total, **{
        name: (before.get(name, 0.0) * earlier + ran.get(name, 0.0) * batches) / total
        if name in before and name in ran else ran.get(name, before.get(name))
        for name in names}}


@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """A checkpoint every `every_steps` batches (0: none within an epoch); the weights of
    the last `keep_epoch_weights` epochs kept to average (`epoch-N.weights.npz`)."""

    every_steps: int = 200
    keep_epoch_weights: int = 0


@dataclasses.dataclass(frozen=True)
class EpochHooks:
    """What a lesson adds to each epoch: `epoch_metrics(epoch, metrics)` adds to its
    metrics before they are checkpointed; `on_epoch_end(epoch, metrics)` sees them once a
    checkpoint holds them (so a rerun never logs an epoch twice); `callbacks`, Keras's,
    for its batches."""

    epoch_metrics: Callable | None = None
    on_epoch_end: Callable | None = None
    callbacks: tuple = ()


def fit_resumably(model, epoch_dataset, validation_data, folder, stopping,
                  checkpointing=Checkpointing(), hooks=EpochHooks(), train_examples=None,
                  verbose="auto", processes=None):
    """Trains `model` until `stopping` (a `Stopping`) says, resuming from `folder` (a
    path or a `TrainingFolder`) if it holds a checkpoint.

    `epoch_dataset(epoch)` returns that epoch's batches, the same ones on every call
    (seed the shuffle with the epoch) so a resumed epoch skips exactly what was done.
    Early stopping leaves the model with its best weights. `hooks` (`EpochHooks`) see
    each epoch's metrics: `loss` and the model's, the validation's `val_*`, and
    `epoch_seconds`, the training batches' time, `examples_per_second` (of
    `train_examples`), `validation_seconds`, `epoch_end_seconds`, `checkpoint_seconds`,
    `epoch_wall_seconds`, `training_share`, the batches' share of the epoch's wall time,
    and `epoch_compile_seconds`, its time compiling: JAX's own timing, or the batches'
    first calls, whichever is more. Checkpoints (`checkpointing`): every
    `every_steps` batches or, in one process, every `CHECKPOINT_EVERY_SECONDS` if that
    comes first, and at each epoch's end, each skipped while it would cost over 5% of
    the time since the last; always at a stop and at the end. A stop lands at the end of
    the batch under way, or ends the command a few seconds after it (`ForcedStop`): it
    loses at most the batches since the last.

    The time budget: no epoch starts that would not end in it with time left for the
    export (an epoch's length is measured without its compiling), and an epoch that runs
    over ends at that batch. `processes` (a `devices.Processes`, with several processes)
    makes each decision to train on, to checkpoint or to stop the chief's, for every
    process.

    A stop signal (Ctrl-C, SIGTERM; `Stop`) checkpoints where the training is and raises
    `KeyboardInterrupt`. Returns the final state, not yet marked finished: the caller does
    that once its end-of-run work is done, so a crash there is redone by a rerun, which
    finds no epoch left to train.
    """
    folder = folder if isinstance(folder, TrainingFolder) else TrainingFolder(folder)
    folder.output.mkdir(parents=True, exist_ok=True)
    validation_data = untuned(validation_data)  # `evaluate` ends without waiting on tf.data
    epochs, started = stopping.epochs, stopping.started

    state = folder.restore(model, folder.load_state())
    budget = WallBudget(stopping.budget_seconds, started, state.wall_seconds)
    decide = processes.chiefs_word if processes else bool
    horizon = ScheduleHorizon(model, budget, epochs, processes is None)
    epoch = _Epoch(model, folder, state, budget, hooks.on_epoch_end, decide,
                   compilation.Compilations(), started, horizon)
    kept_before, ForcedStop.kept = ForcedStop.kept, functools.partial(kept_in, folder)
    try:
        with epoch.compiled:
            while decide(state.epoch < epochs
                         and state.epochs_without_improvement < stopping.patience
                         and within_budget(state, budget)):
                print(f"Epoch {state.epoch + 1}/{epochs}"
                      + (f" (resuming: {state.where})" if state.step or state.epoch_trained
                         else ""), flush=True)
                metrics = epoch.train(epoch_dataset, validation_data, checkpointing.every_steps,
                                      hooks.callbacks, verbose, train_examples)
                epoch.validate(validation_data, metrics, hooks.epoch_metrics)
                with Stop.deferred():  # the epoch's end is one step: a stop waits for it
                    update_early_stopping(model, folder, state, metrics, stopping.monitor)
                    if checkpointing.keep_epoch_weights:
                        folder.keep_epoch_weights(model, state.epoch + 1,
                                                  checkpointing.keep_epoch_weights, state)
                    if horizon:
                        metrics["horizon_steps"] = horizon.schedule.horizon_steps
                    epoch.end(metrics, last=state.epoch + 1 >= epochs or budget.exhausted())
                    horizon.after_epoch(state)
                Stop.raise_if_requested()  # (its checkpoint holds the whole epoch)
            epoch.save()
    except KeyboardInterrupt:
        epoch.save_at_stop()
        raise
    finally:
        ForcedStop.kept = kept_before
    folder.synchronize("trained")
    folder.load_best_weights(model, state)
    return state


class _Epoch:
    """The steps of one epoch in `fit_resumably`, and what a stop during them saves."""

    def __init__(self, model, folder, state, budget, on_epoch_end, decide, compiled,
                 started=None, horizon=None):
        self.model, self.folder, self.state, self.budget = model, folder, state, budget
        self.on_epoch_end, self.decide = on_epoch_end, decide
        self.compiled = compiled  # a `compilation.Compilations`: JAX's compiling, timed
        self.ahead = compilation.AheadOfTime()  # every batch shape's steps, at once
        self.started = started_at() if started is None else started
        self.first_batch = None  # seconds from `started` to this process's first batch
        self.horizon = horizon  # a `ScheduleHorizon`, or None
        self.compiling_mark = 0.0  # its seconds at the epoch's start
        self.first_calls = 0.0  # the epoch's batches' first-call time (`_BatchGuard`)
        self.unlogged = []  # epochs checkpointed nowhere yet: logged after the next one
        self.changed = False  # trained since the last checkpoint
        self.guard = None  # the `_BatchGuard` of the epoch's `fit` while it runs
        self.last_checkpoint = self.mark = time.perf_counter()

    def train(self, epoch_dataset, validation_data, every, callbacks, verbose, train_examples):
        """The epoch's batches (those not trained yet); returns their metrics (with
        `seconds_to_first_batch` in the epoch of this command's first batch)."""
        state, model = self.state, self.model
        resumed = state.step or state.epoch_trained
        self.guard = batches = _BatchGuard(self.folder, state, every, self.budget,
                                           self.decide, self.horizon)
        started = time.perf_counter()
        if not state.epoch_trained:
            dataset = untuned(epoch_dataset(state.epoch))  # `fit` ends without waiting
            if self.horizon:
                self.horizon.start_epoch(state, _batch_count(dataset))
            if state.step:
                dataset = dataset.skip(state.step)
            if not _is_empty(dataset):
                self.changed = True
                ahead = _CompileAhead(self.ahead, dataset, validation_data)
                with Stop.deferred():
                    logs = model.fit(dataset, epochs=1, verbose=verbose, shuffle=False,
                                     callbacks=[ahead, batches, *callbacks]).history
                if batches.batches_run:
                    state.partial = _combined(batches.before, {
                        name: float(values[-1]) for name, values in logs.items()},
                        batches.batches_run)
            state.epoch_trained, self.guard = True, None
            Stop.raise_if_requested()  # it came after the last batch's end
        seconds = time.perf_counter() - started - batches.checkpoint_seconds
        state.train_seconds += seconds
        self.first_calls = batches.first_calls_seconds
        if batches.out_of_time:
            print(f"The time budget ends epoch {state.epoch + 1} after batch {state.step}.",
                  flush=True)
        metrics = {name: value for name, value in state.partial.items() if name != "batches"}
        metrics.update(checkpoint_seconds=batches.checkpoint_seconds)
        if self.first_batch is None and batches.first_batch is not None:
            self.first_batch = metrics["seconds_to_first_batch"] = \
                batches.first_batch - self.started
        if not resumed:
            metrics["epoch_seconds"] = seconds
            if train_examples and not batches.out_of_time:
                metrics["examples_per_second"] = train_examples / seconds
        return metrics

    def validate(self, validation_data, metrics, epoch_metrics):
        """The validation loss and metrics, then the lesson's own (`epoch_metrics`)."""
        started, compiled_before, first_calls = time.perf_counter(), self.compiled.seconds, 0.0
        if validation_data is not None:
            check = _BatchGuard(self.folder, self.state, 0, self.budget)
            with Stop.deferred():
                logs = self.model.evaluate(validation_data, verbose=0, return_dict=True,
                                           callbacks=[check])
            Stop.raise_if_requested()
            metrics.update({f"val_{name}": value for name, value in logs.items()})
            first_calls = check.first_calls_seconds
            self.first_calls += first_calls
        validated = time.perf_counter()
        metrics["validation_seconds"] = validated - started
        if epoch_metrics:
            epoch_metrics(self.state.epoch, metrics)
        metrics["epoch_end_seconds"] = time.perf_counter() - validated
        # the after-training work redoes one validation and epoch end (averaging), then exports
        compiling = max(self.compiled.seconds - compiled_before, first_calls)
        self.budget.measured_end_work(time.perf_counter() - started - compiling,
                                      self.folder.checkpoint_seconds)

    def end(self, metrics, last):
        """Closes the epoch: its wall time, then a checkpoint if one is due (or `last`),
        then the epochs it holds are handed to `on_epoch_end`."""
        state = self.state
        now = time.perf_counter()
        metrics["epoch_wall_seconds"] = now - self.mark
        if "epoch_seconds" in metrics:
            metrics["training_share"] = metrics["epoch_seconds"] / metrics["epoch_wall_seconds"]
        compiling = max(self.compiled.seconds - self.compiling_mark, self.first_calls)
        if compiling:
            metrics["epoch_compile_seconds"] = compiling
        self.mark, self.compiling_mark, self.first_calls = now, self.compiled.seconds, 0.0
        state.history.append(metrics)
        state.epoch, state.step, state.epoch_trained, state.partial = state.epoch + 1, 0, False, {}
        self.unlogged.append(state.epoch - 1)
        if self.decide(last or Stop.requested or self.folder.due(now - self.last_checkpoint)):
            self.save()

    def save(self):
        """A checkpoint of where the training is (unless the last one holds it: the one
        before stays a real fallback), then the epochs it holds are logged."""
        held = self.guard is not None and self.guard.saved_at == self.state.step
        if self.changed and not held or self.unlogged or self.folder.unwritten:
            if self.guard is not None and self.guard.batches_run:  # stopped mid-epoch
                self.state.partial = self.guard.epoch_metrics
            self.state.wall_seconds = self.budget.used()
            self.folder.checkpoint(self.model, self.state)
            self.last_checkpoint = time.perf_counter()
            self.changed = False
        unlogged, self.unlogged = self.unlogged, []
        for epoch in unlogged:
            if self.on_epoch_end:
                self.on_epoch_end(epoch, self.state.history[epoch])

    def save_at_stop(self):
        """On a stop: a checkpoint of what the training has (said so), or, if the model's
        weights cannot be read (a second signal cut a step short), the last one's."""
        Stop.reported = True
        if Stop.signals <= 1:
            try:
                self.save()
                print(f"\nInterrupted: checkpoint saved ({self.state.where}). Rerun the same "
                      "command to resume.", flush=True)
                return
            except Exception as error:  # noqa: BLE001  the last checkpoint still holds
                print(f"\nThe checkpoint at the stop failed ({type(error).__name__}).")
        print(f"\nInterrupted: {kept_in(self.folder)}", flush=True)


def kept_in(folder):
    """What a stop keeps of the training in `folder` (a `TrainingFolder`), in words."""
    from workflows.core.checkpoints import DamagedStateError

    try:
        saved = folder.load_state()
    except DamagedStateError as error:
        return str(error)
    if saved.finished:
        return "the run is trained and logged."
    if not saved.checkpoint:
        return "no checkpoint was written yet. Rerun the same command to start again."
    return f"the last checkpoint ({saved.where}) is kept. Rerun the same command to resume."


def _batch_count(dataset):
    """How many batches `dataset` (a `PyDataset` or a `tf.data` pipeline) holds, or None."""
    if hasattr(dataset, "__len__"):
        return len(dataset)
    cardinality = getattr(dataset, "cardinality", None)
    count = int(cardinality()) if cardinality is not None else -1
    return count if count >= 0 else None


def _is_empty(dataset):
    """Whether `dataset` (a `PyDataset` or a `tf.data` pipeline) is known to hold no batch."""
    return _batch_count(dataset) == 0
