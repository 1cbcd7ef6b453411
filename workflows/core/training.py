"""A run and its training, written once for every lesson, called by the lesson in order.

A lesson's `train` reads top to bottom:

    with TrainingRun(EXPERIMENT, name, config, work_dir, retrain, tags) as run:
        data = run.load(lambda: load_data(config))   # the chief process first
        if run.open(data.fingerprint):                # False: already trained
            model = build_model(config, data)
            run.start(model, params=..., artifacts=...)   # the MLflow run, new or resumed
            run.fit(train_batches, validation_batches, train_examples)
            run.export(ModelExport(...))
    return run.run_id

`TrainingRun` does what is the same everywhere: join the other processes and place the
model on the devices (`devices.py`), find the run folder and lock it, start or
resume the MLflow run, fit resumably (`fit_resumably`, below), log the setup, each epoch (and
those a crash left unlogged), the summary, curves and schedule, choose between the best
epoch and the average of the last ones, refuse non-finite weights, export and log the
model, mark the run finished. Under it, `fit_resumably` checkpoints every epoch and every
N batches, stops early, keeps a time budget and resumes mid-epoch.
"""

import contextlib
import dataclasses
import errno
import json
import math
import os
import shutil
import tempfile
import time
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import filelock
import keras
import mlflow
import numpy as np

from data_prep import cache
from data_prep.cache import sha256_of
from data_prep.commands import UserError
from workflows.core import devices, store
from workflows.core.config import describe
from workflows.core.models import export_and_log_model
from workflows.core.runs import RunNotFoundError, stored_run


def run_folder(lesson, config, fingerprint, work_dir=None):
    """`work/runs/<experiment>/<run name>-<hash of config and data>`; where it trains
    (`distribution`) is not part of it, so a run resumes on other devices."""
    return _run_folder(lesson.experiment, lesson.run_name(config), config, fingerprint,
                       work_dir)


def _run_folder(experiment, name, config, fingerprint, work_dir=None):
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k != "distribution"}
    key = cache.settings_key({"config": fields, "data": fingerprint})
    return cache.work_dir(work_dir) / "runs" / experiment / f"{name}-{key}"


class TrainingRun:
    """One training run of `config`, as MLflow run `name` of `experiment`: a new run
    gets `tags` (`store.child_tags` nests it under a search); `after_epoch(epoch, metrics)` is
    called once each epoch is checkpointed and logged (a search's pruner). With several
    processes every process runs the same steps; only the chief (process 0) writes the
    run folder and the store."""

    def __init__(self, experiment, name, config, work_dir=None, retrain=False, tags=None,
                 after_epoch=None):
        self.experiment, self.name, self.config = experiment, name, config
        self.work_dir, self.retrain, self.tags = work_dir, retrain, tags or {}
        self.after_epoch = after_epoch
        self.run_id = self.model = self.state = self.folder = None
        self._steps = contextlib.ExitStack()

    def __enter__(self):
        devices.check(self.config.distribution)  # before any data is read
        devices.use_persistent_cache(self.work_dir)
        self.processes = devices.join_processes(self.config.distribution)
        return self

    def __exit__(self, kind, error, traceback):
        self._steps.__exit__(kind, error, traceback)  # the MLflow run ends here
        if kind is None:
            if self.state is not None:  # trained now, not found trained
                self._report()
            self.processes.leave()
        return False

    @property
    def is_chief(self):
        return self.processes.is_chief

    def load(self, load_data):
        """`load_data()`, in the chief process first (it prepares; the others read)."""
        return self.processes.chief_first(load_data)

    def open(self, fingerprint):
        """Locks the run folder of this config and data and places the training on the
        devices; returns False when the run is already trained (`run_id` is its id)."""
        self.fingerprint = fingerprint
        self.folder = _run_folder(self.experiment, self.name, self.config, fingerprint,
                                  self.work_dir)
        if self.is_chief:
            self._steps.enter_context(training_lock(self.folder))
        self.placement = self._steps.enter_context(devices.placed(self.config.distribution))
        state = self.processes.chief_first(lambda: _starting_state(
            self.folder, self.retrain, self.processes))
        if state.run_id and self.is_chief:
            _check_run_is_in_this_store(state.run_id, self.folder)
            if not state.finished and not TrainingFolder(self.folder).can_resume(state):
                state = _start_over(state, self.folder)
        self.run_id = state.run_id
        if state.finished:
            print(f"{self.name} with this config is already trained: run {state.run_id} "
                  f"({self.folder}). Pass --retrain to train it again.")
            return False
        self.state = state
        print(f"Training {self.name} on {len(self.placement.devices)} device(s)"
              + (f" of {self.processes.count} processes" if self.processes.count > 1 else "")
              + f":\n{describe(self.config)}")
        keras.utils.set_random_seed(self.config.seed)  # before the model is built
        return True

    def start(self, model, *, params=None, tags=None, artifacts=None, metrics=None):
        """Starts the MLflow run (or resumes it: then logs the epochs it missed); a new
        run logs the config, `params`, `tags`, `artifacts` (name -> text or dict) and
        `metrics`."""
        self.model = model
        print(f"{model.count_params():,} parameters")
        if self.is_chief:
            self._steps.enter_context(store.tracked_run(self.experiment, self.name, self.run_id,
                                                  self.tags))
        self.training_folder = self._steps.enter_context(
            _training_folder(self.folder, self.processes))
        if not self.is_chief:
            return
        if self.run_id:
            print(f"Resuming run {self.run_id} from {self.folder}")
            store.log_missing_epochs(self.run_id, self.state.history)
            return
        store.log_run_setup(self.config, params or {}, tags or {}, artifacts or {}, metrics or {},
                      self.folder, self.fingerprint)
        mlflow.set_tag("devices", ", ".join(map(str, self.placement.devices)))
        self.state.run_id = self.run_id = mlflow.active_run().info.run_id
        TrainingFolder(self.folder).save_state(self.state)

    def fit(self, train_batches, validation_batches, train_examples, *, epoch_end=None,
            curves=("loss", "accuracy"), time_budget_seconds=None, average_last_epochs=0):
        """Fits the model resumably (`fit_resumably`) on `train_batches(epoch)`
        (the same batches on every call), stopping early on the validation loss.

        `epoch_end(epoch, metrics)` adds the lesson's own metrics to each epoch's; the
        summary draws `curves`. `average_last_epochs` > 1: the mean of the last epochs'
        weights replaces the best epoch's if its validation loss is lower."""
        config, placement, chief = self.config, self.placement, self.is_chief
        self.validation_batches = placement.batches(validation_batches)
        self.epoch_end = epoch_end

        def epoch_metrics(epoch, metrics):
            if epoch_end:
                epoch_end(epoch, metrics)
            metrics["learning_rate"] = float(keras.ops.convert_to_numpy(
                self.model.optimizer.learning_rate))

        with devices.Compilations() as compiled:
            self.state = fit_resumably(
                self.model, lambda epoch: placement.batches(train_batches(epoch)),
                self.validation_batches, self.training_folder, config.epochs,
                config.patience, config.checkpoint_every_steps, train_examples=train_examples,
                epoch_metrics=epoch_metrics,
                on_epoch_end=(lambda epoch, metrics: store.log_epoch(epoch, metrics,
                                                               self.after_epoch))
                if chief else None,
                verbose=store.progress_verbosity() if chief else 0,
                time_budget_seconds=time_budget_seconds,
                keep_epoch_weights=average_last_epochs, agree=self.processes.chiefs_word)
        if chief:
            store.log_training_summary(self.model, self.state, curves)
            store.log_compilations(compiled)
        if average_last_epochs > 1:
            self._choose_averaged_weights(average_last_epochs)
        return self.state

    def export(self, export):
        """Refuses non-finite weights, saves the model as `export` says, logs it and
        marks the run finished."""
        check_finite(self.model, self.validation_batches)
        export_and_log_model(export, self.training_folder.output, log=self.is_chief)
        self.artifact = export.artifact
        if self.is_chief:
            TrainingFolder(self.folder).mark_finished(self.state)
        self.state.finished = True

    def _choose_averaged_weights(self, last_epochs):
        """Checkpoint averaging: the chief logs both (`averaged_val_*` beside
        `best_val_*`) and an `exported_weights` tag saying which won."""
        choice, metrics = _average_if_better(self.model, self.validation_batches,
                                             self.training_folder, self.state, last_epochs,
                                             self.epoch_end)
        if self.is_chief:
            mlflow.log_metrics({f"averaged_{name}": value for name, value in metrics.items()
                                if name.startswith("val_")})
            mlflow.set_tag("exported_weights", choice)

    def _report(self):
        """Once every process is done: the run, its best epoch and where to see it."""
        self.processes.barrier("finished")
        state = self.state if self.is_chief else TrainingFolder(self.folder).load_state()
        self.run_id = state.run_id  # another process's own state never had it
        print(f"Run {state.run_id}: best val_loss {state.best_val_loss:.4f} at epoch "
              f"{state.best_epoch}, {state.train_seconds / 60:.1f} training minutes; model in "
              f"{self.folder / self.artifact}")
        if self.is_chief:
            experiment = store.use_experiment(self.experiment)
            print("In the MLflow UI (python -m workflows.mlflow_ui): "
                  f"{store.runs_table_url(experiment.experiment_id, state.run_id)}")


@contextlib.contextmanager
def training_lock(folder):
    """Only one process trains a run folder at a time. A second one (the same `train`
    started twice, two sweeps that share a setting) waits, then reuses the run."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(folder.parent / f".{folder.name}.lock")
    try:
        lock.acquire(blocking=False)
    except filelock.Timeout:
        print(f"Another process is training this exact config ({folder}); waiting for it "
              "to finish (Ctrl-C to stop waiting)...", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _start_over(state, folder):
    """No checkpoint of the run folder is intact: the training starts again as a new
    MLflow run (each epoch logged once), the old run marked FAILED."""
    print(f"No checkpoint in {folder} is intact: training again from the first epoch as a "
          f"new run (run {state.run_id} is marked FAILED).", flush=True)
    mlflow.MlflowClient().set_terminated(state.run_id, "FAILED")
    fresh = starting_state(folder, retrain=True)  # the folder emptied
    TrainingFolder(folder).save_state(fresh)
    return fresh


def _check_run_is_in_this_store(run_id, folder):
    if stored_run(run_id) is None:
        raise RunNotFoundError(
            f"The run folder {folder} belongs to run {run_id}, which the tracking store "
            f"{store.tracking_uri()} does not have: train it again here with --retrain, "
            "or set MLFLOW_TRACKING_URI to the store that has it.")


def _starting_state(folder, retrain, processes):
    """The run folder's state; the chief first clears it (`retrain`) and its partial
    files."""
    if processes.is_chief:
        state = starting_state(folder, retrain)
        remove_partial_files(folder)
        return state
    return TrainingFolder(folder).load_state()


@contextlib.contextmanager
def _training_folder(folder, processes):
    """The run folder as this process trains in it: the chief writes it; another
    process reads it and writes to a scratch folder, removed at the end."""
    if processes.count == 1:
        yield TrainingFolder(folder)
        return
    with tempfile.TemporaryDirectory(prefix="nlpkit-process-") as scratch:
        yield TrainingFolder(folder, None if processes.is_chief else scratch,
                             processes.barrier)


# ## Which weights a run exports


def _average_if_better(model, validation_batches, folder, state, last_epochs, epoch_end):
    """Loads the average of the `last_epochs` if its validation loss beats the best
    epoch's; returns what the model holds and the average's validation metrics.
    `folder` is the `TrainingFolder` the run trained in."""
    epochs = folder.intact_epoch_weights(
        range(max(state.epoch - last_epochs + 1, 1), state.epoch + 1), state)
    if len(epochs) < 2:
        return f"best epoch {state.best_epoch} (fewer than two epochs to average)", {}
    average_weights(model, [folder.epoch_weights(epoch) for epoch in epochs])
    metrics = {"val_loss": model.evaluate(validation_batches, verbose=0,
                                          return_dict=True)["loss"]}
    if epoch_end:
        epoch_end(state.epoch, metrics)
    span = f"epochs {epochs[0]}-{epochs[-1]}"
    if metrics["val_loss"] < state.best_val_loss:
        print(f"Exporting the average of {span}: val_loss {metrics['val_loss']:.4f} < "
              f"{state.best_val_loss:.4f} (best epoch {state.best_epoch})")
        return f"average of {span}", metrics
    folder.load_best_weights(model, state)
    print(f"Keeping the best epoch {state.best_epoch}: the average of {span} has val_loss "
          f"{metrics['val_loss']:.4f} >= {state.best_val_loss:.4f}")
    return f"best epoch {state.best_epoch}", metrics


class ExportError(UserError):
    """A trained model that must not leave its run (non-finite weights or outputs)."""


def check_finite(model, validation_batches):
    """Refuses, in one line, to export a model whose weights or outputs are not finite:
    every weight is checked, and the model is evaluated on one validation batch."""
    for variable in model.weights:
        if "float" in str(variable.dtype):
            value = keras.ops.convert_to_numpy(variable.value)
            if not np.isfinite(value).all():
                raise ExportError(f"The trained weight {variable.path} holds NaN or infinite "
                                  f"values: nothing was exported or logged. {RETRAIN_HINT}")
    loss = model.evaluate(validation_batches, steps=1, verbose=0, return_dict=True)["loss"]
    if not np.isfinite(loss):
        raise ExportError(f"The trained model's loss on a validation batch is {loss}: nothing "
                          f"was exported or logged. {RETRAIN_HINT}")


RETRAIN_HINT = ("Train it again with --retrain (a lower --set learning_rate=... if the loss "
                "diverged).")


# ## Resumable training: checkpoints every epoch and every N batches, early stopping, resume

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
    try:
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
                logs = model.fit(dataset, validation_data=validation_data, epochs=1,
                                 verbose=verbose, shuffle=False,
                                 callbacks=[checkpoints, timer, *callbacks])
            except KeyboardInterrupt as stop:
                state.train_seconds += time.perf_counter() - started
                folder.checkpoint(model, state)
                print(f"\nInterrupted: checkpoint saved after batch {state.step} of epoch "
                      f"{state.epoch + 1}. Rerun the same command to resume.", flush=True)
                stop.checkpointed = True
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
    except KeyboardInterrupt as stop:  # outside an epoch's batches: its last checkpoint holds
        if not getattr(stop, "checkpointed", False):
            saved = folder.load_state()
            print(f"\nInterrupted: the last checkpoint (epoch {saved.epoch + 1}, after batch "
                  f"{saved.step}) is kept. Rerun the same command to resume.", flush=True)
        raise
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
