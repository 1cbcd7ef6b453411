"""A run and its training, written once for every lesson.

`train_lesson` runs a lesson's hooks (`core/lesson.py`) in order:

    with TrainingRun(lesson.experiment, name, config, work_dir, request) as training:
        data = training.load(lambda: lesson.load_data(config, place))  # the chief first
        # False: already trained (its run folder is finished)
        if training.open(lesson.data_identity(config, data, place), data.fingerprint):
            built = lesson.build(config, data, place)
            training.start(built, lesson.datasets(config, data, place))  # the MLflow run
            lesson.fit(training, config, data, built)  # training.fit(train_batches, ...)
            training.export(lesson.export(config, data, built))
    return training.run_id

`TrainingRun` does what is the same everywhere: join the other processes and place the
model on the devices (`devices.py`), find the run folder and lock it, start or
resume the MLflow run, fit resumably (`fitting.fit_resumably`) with the config's shared
training options (epochs, patience, checkpoints, the wall budget, averaging), log the
setup, each epoch (and those a crash left unlogged), the summary, curves and schedule,
choose between the best epoch and the average of the last ones, refuse non-finite
weights, export and log the model, mark the run finished.
"""

import contextlib
import dataclasses
import tempfile
import traceback

import filelock
import keras
import mlflow

from data_prep import cache
from process.errors import KeptWorkError, reported_in_one_line
from process.stops import ForcedStop
from workflows.core import compilation, devices, store, tracking
from workflows.core.checkpoints import (
    DamagedStateError,
    TrainingFolder,
    remove_partial_files,
    starting_state,
)
from workflows.core.config import NOT_IN_RUN_FOLDER, describe
from workflows.core.exported_weights import average_if_better, check_finite
from workflows.core.fitting import Checkpointing, EpochHooks, fit_resumably, kept_in, started_at
from workflows.core.lesson import DataPlace, TrainRequest
from workflows.core.models import export_and_log_model
from workflows.core.runs import RunNotFoundError, stored_run
from workflows.core.stopping import VALIDATION_LOSS, Stopping


def train_lesson(lesson, config, place=DataPlace(), request=TrainRequest()):
    """Trains `config` of `lesson` (or resumes it, or finds it trained) from the data at
    `place` (a `DataPlace`), as `request` (a `TrainRequest`) says; returns the run id."""
    with TrainingRun(lesson.experiment, lesson.run_name(config), config, place.work_dir,
                     request, label=lesson.run_label(config)) as training:
        data = training.load(lambda: lesson.load_data(config, place))
        if training.open(lesson.data_identity(config, data, place), data.fingerprint):
            built = lesson.build(config, data, place)
            training.start(built, lesson.datasets(config, data, place))
            lesson.fit(training, config, data, built)
            training.export(lesson.export(config, data, built))
    return training.run_id


def run_folder(lesson, config, fingerprint, work_dir=None):
    """`work/runs/<experiment>/<run name>-<hash of config and data>`; where it trains
    (`distribution`) is not part of it, so a run resumes on other devices."""
    return _run_folder(lesson.experiment, lesson.run_name(config), config, fingerprint,
                       work_dir)


def _run_folder(experiment, name, config, fingerprint, work_dir=None):
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in NOT_IN_RUN_FOLDER}
    key = cache.settings_key({"config": fields, "data": fingerprint})
    return cache.work_dir(work_dir) / "runs" / experiment / f"{name}-{key}"


class TrainingRun:
    """One training run of `config`, as MLflow run `label` of `experiment`, as `request`
    (a `TrainRequest`) says: a new run gets its `tags` (`tracking.child_tags` nests it under
    a study); its `after_epoch(epoch, metrics)` is called once each epoch is
    checkpointed and logged (a study's pruner). With several processes every process
    runs the same steps; only the chief (process 0) writes the run folder and the store."""

    def __init__(self, experiment, name, config, work_dir=None, request=None, label=None):
        self.experiment, self.name, self.config = experiment, name, config
        self.label = label or name  # the MLflow run's name (`Lesson.run_label`)
        self.work_dir = work_dir
        self.retrain = bool(request and request.retrain)
        self.tags = dict(request.tags) if request else {}
        self.after_epoch = request and request.after_epoch
        self.monitor = VALIDATION_LOSS  # what chose the best epoch (`fit`)
        self.started = started_at()  # what a time budget counts from
        self.run_id = self.model = self.state = self.folder = None
        self.logged_epochs = set()  # epochs (1-based) the MLflow run has
        self._steps = contextlib.ExitStack()

    def __enter__(self):
        self._kept_before = ForcedStop.kept
        devices.check(self.config.distribution)  # before any data is read
        compilation.use_persistent_cache(self.work_dir)
        self.processes = devices.join_processes(self.config.distribution)
        return self

    def __exit__(self, kind, error, traceback):
        self._steps.__exit__(kind, error, traceback)  # the MLflow run ends here
        if kind is None:  # (after a stop, the command's last line says what was kept)
            ForcedStop.kept = self._kept_before
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

    def open(self, identity, fingerprint=None):
        """Locks the run folder of this config and data (`identity`: the data's
        fingerprint, tagged as `fingerprint` if that is given, and anything else the
        training reads) and places the training on the devices; returns False when the
        run is already trained (`run_id` is its id)."""
        self.fingerprint = fingerprint or identity
        self.folder = _run_folder(self.experiment, self.name, self.config, identity,
                                  self.work_dir)
        if self.is_chief:
            self._steps.enter_context(training_lock(self.folder))
        self.placement = self._steps.enter_context(devices.placed(self.config.distribution))
        state = self.processes.chief_first(lambda: _starting_state(
            self.folder, self.retrain, self.processes))
        if state.run_id and self.is_chief:
            check_run_is_in_this_store(state.run_id, self.folder)
            if not state.finished and not TrainingFolder(self.folder).can_resume(state):
                state = _start_over(state, self.folder)
        self.run_id = state.run_id
        ForcedStop.kept = lambda: kept_in(TrainingFolder(self.folder))  # data, export: too
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

    def start(self, built, datasets=()):
        """Starts the MLflow run (or resumes it: then logs the epochs it missed); a new
        run logs the config, what `built` (a `Built`) says it logs, and `datasets` (the
        `RunDataset`s it reads) as its inputs."""
        self.model = built.model
        if self.model is not None:
            print(f"{self.model.count_params():,} parameters")
        if self.is_chief:
            if not self.run_id:  # one a forced stop ended before its first save: never resumed
                _mark_failed_runs_of(self.folder, "its command ended before the run's first "
                                                  "save; a new run trained in its place")
            self._steps.enter_context(store.tracked_run(
                self.experiment, self.label, self.run_id,
                {**self.tags, "run_folder": str(self.folder)},
                system_metrics=getattr(self.config, "system_metrics", False)))
        self.training_folder = self._steps.enter_context(
            _training_folder(self.folder, self.processes))
        if not self.is_chief:
            return
        if self.run_id:
            print(f"Resuming run {self.run_id} from {self.folder}")
            self.logged_epochs = tracking.log_missing_epochs(self.run_id, self.state.history)
            return
        tracking.log_run_setup(self.config, built.params, built.tags, built.artifacts,
                               built.metrics, self.folder, self.fingerprint)
        tracking.log_datasets(datasets)
        mlflow.set_tag("devices", ", ".join(map(str, self.placement.devices)))
        self.state.run_id = self.run_id = mlflow.active_run().info.run_id
        TrainingFolder(self.folder).save_state(self.state)

    def fit(self, train_batches, validation_batches, train_examples, *, epoch_end=None,
            curves=("loss", "accuracy"), model=None, monitor=VALIDATION_LOSS):
        """Fits the model resumably (`fit_resumably`) on `train_batches(epoch)`
        (the same batches on every call), as the config's training options say: epochs,
        patience, checkpoints, `max_train_minutes` (from the command's start, summed over
        resumptions) and `average_epochs` (the mean of the last epochs' weights replaces
        the best epoch's if `monitor` scores it better).

        `epoch_end(epoch, metrics)` adds the lesson's own metrics to each epoch's (and
        to the averaged weights', as epoch -1); the summary draws `curves`. `model`: a
        custom trainer to fit instead of the built model (the dual encoder's cached
        loss); `monitor`: the `Monitor` that chooses the best epoch and stops early
        (`validation_batches` None: `epoch_end` computes its metric)."""
        config, placement, chief = self.config, self.placement, self.is_chief
        self.model = model or self.model
        self.monitor = monitor
        self.validation_batches = None if validation_batches is None else \
            placement.batches(validation_batches)
        self.epoch_end = epoch_end
        minutes = getattr(config, "max_train_minutes", None)

        def epoch_metrics(epoch, metrics):
            if epoch_end:
                epoch_end(epoch, metrics)
            metrics["learning_rate"] = float(keras.ops.convert_to_numpy(
                self.model.optimizer.learning_rate))

        with compilation.Compilations() as compiled:
            self.state = fit_resumably(
                self.model, lambda epoch: placement.batches(train_batches(epoch)),
                self.validation_batches, self.training_folder,
                Stopping(config.epochs, config.patience, monitor,
                         minutes and minutes * 60, self.started),
                Checkpointing(config.checkpoint_every_steps, config.average_epochs),
                EpochHooks(epoch_metrics, self._log_epoch if chief else None),
                train_examples, verbose=tracking.progress_verbosity() if chief else 0,
                processes=self.processes if self.processes.count > 1 else None)
        if chief:
            tracking.log_training_summary(self.model, self.state, curves, monitor.name)
            tracking.log_compilations(compiled)
        if config.average_epochs > 1 and self.validation_batches is not None:
            self._choose_averaged_weights(config.average_epochs)
        return self.state

    def _log_epoch(self, epoch, metrics):
        """Logs an epoch once: one the run has (trained again after a damaged checkpoint
        fell back to an older one) keeps its first values."""
        if epoch + 1 not in self.logged_epochs:
            tracking.log_epoch(epoch, metrics, self.after_epoch)

    def export(self, export):
        """Refuses non-finite weights, saves the model as `export` says, logs it and
        marks the run finished."""
        if self.model is not None:
            check_finite(self.model, getattr(self, "validation_batches", None))
        try:
            export_and_log_model(export, self.training_folder.output, log=self.is_chief)
        except Exception as error:
            if reported_in_one_line(error) or store.is_store_failure(error):
                raise
            raise self._export_failed(error) from error
        self.artifact = export.artifact
        if self.is_chief:
            TrainingFolder(self.folder).mark_finished(self.state)
        self.state.finished = True

    def _export_failed(self, error):
        """The one line of a failed export (its traceback written beside the run's
        checkpoints): the training is kept, and the same command exports it again."""
        trace = self.folder / "export_failure.txt"
        trace.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
        reason = (str(error).strip().splitlines() or [""])[0][:300]
        return KeptWorkError(
            f"run {self.run_id}'s training is kept ({self.folder}), but saving or logging "
            f"its model failed: {type(error).__name__}: {reason} (the traceback is in "
            f"{trace}). Once that is fixed, rerun the same command: it exports the model "
            "without training again.")

    def _choose_averaged_weights(self, last_epochs):
        """Checkpoint averaging: the chief logs both (`averaged_val_*` beside
        `best_val_*`) and an `exported_weights` tag saying which won."""
        choice, metrics = average_if_better(self.model, self.validation_batches,
                                             self.training_folder, self.state, last_epochs,
                                             self.epoch_end, self.monitor)
        if self.is_chief:
            tracking.log_metrics({f"averaged_{name}": value for name, value in metrics.items()
                                if name.startswith("val_")})
            mlflow.set_tag("exported_weights", choice)

    def _report(self):
        """Once every process is done: the run, its best epoch and where to see it."""
        self.processes.barrier("finished")
        state = self.state if self.is_chief else TrainingFolder(self.folder).load_state()
        self.run_id = state.run_id  # another process's own state never had it
        if state.history:
            best = state.history[state.best_epoch - 1].get(self.monitor.name,
                                                           state.best_score)
            trained = (f"best {self.monitor.name} {best:.4f} at epoch {state.best_epoch}, "
                       f"{state.train_seconds / 60:.1f} training minutes; ")
        else:
            trained = "nothing to fit; "
        print(f"Run {state.run_id}: {trained}model in {self.folder / self.artifact}")
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


def check_run_is_in_this_store(run_id, folder):
    """Refuses a run folder whose run the tracking store does not have (the folder was
    built with another `MLFLOW_TRACKING_URI`)."""
    if stored_run(run_id) is None:
        raise RunNotFoundError(
            f"The run folder {folder} belongs to run {run_id}, which the tracking store "
            f"{store.tracking_uri()} does not have: train it again here with --retrain, "
            "or set MLFLOW_TRACKING_URI to the store that has it.")


def _starting_state(folder, retrain, processes):
    """The run folder's state; the chief first clears it (`retrain`) and its partial
    files. A folder whose state is damaged is refused, its run marked FAILED (on a
    `retrain` too: the new run replaces it)."""
    if processes.is_chief:
        try:
            TrainingFolder(folder).load_state()
        except DamagedStateError:
            _mark_failed_runs_of(folder, "its run folder's state files were damaged")
            if not retrain:
                raise
        state = starting_state(folder, retrain)
        remove_partial_files(folder)
        return state
    return TrainingFolder(folder).load_state()


def _mark_failed_runs_of(folder, why):
    """Marks FAILED, saying `why`, the unfinished MLflow runs that trained in `folder`."""
    uri = store.tracking_uri()
    with store.opened_store(uri):  # a new store is made whole first, never in place
        client = mlflow.MlflowClient(uri)
        experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    for run in client.search_runs(experiments, f"tags.run_folder = '{folder}'"):
        if run.info.status in ("RUNNING", "KILLED", "SCHEDULED"):
            client.set_tag(run.info.run_id, "failure", why)
            client.set_terminated(run.info.run_id, "FAILED")


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
