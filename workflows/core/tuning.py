"""Hyperparameter tuning with Optuna, written once for every lesson's `tune` step.

A tuning is an Optuna study in a database (SQLite beside the MLflow store by default,
or a team's PostgreSQL), so any number of workers, on one machine or many, take
trials from one study: `--workers N` starts N local worker processes; the same
command with `--study NAME --storage URL` on another machine joins them. Each trial
trains one config through the shared training (`training.train`), as an MLflow child run of the
study's parent run; its validation metric is reported every epoch, so the pruner
stops a poor trial early (the child run is then KILLED and tagged `trial_state`
PRUNED). Workers send heartbeats: the trial of a killed worker is marked failed and
queued again, and since its config is the same, its run resumes from its last
checkpoint. Ctrl-C queues the interrupted trial the same way. The parent run keeps
the summary: the best value and params, the best trial's run (`best_child_run_id`,
which `register` follows), the optimization history and the parameter importances.
"""

import contextlib
import ctypes
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import mlflow
import optuna
import sqlalchemy

from data_prep import cache
from process.stops import STOP_GRACE_SECONDS, ForcedStop
from workflows.core import servers, store, tracking
from workflows.core.config import ConfigError, apply_overrides, describe
from workflows.core.metric_groups import ungrouped
from workflows.core.tuning_summary import describe_values, summarize

HEARTBEAT_SECONDS = 20
GRACE_SECONDS = 60  # a trial without a heartbeat for this long is failed and queued again
PARENT_ATTR = "mlflow_parent_run_id"
DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)


# ## The study and its parent run


def default_storage(work_dir=None):
    """SQLite beside a SQLite MLflow store and named after it (`mlflow.db`:
    `mlflow.optuna.db`, so two stores of one folder keep their own studies), else in
    the work folder."""
    uri = store.tracking_uri()
    if uri.startswith("sqlite:///"):
        database = Path(uri[len('sqlite:///'):])
        return f"sqlite:///{database.with_name(database.stem + '.optuna.db')}"
    return f"sqlite:///{cache.work_dir(work_dir) / 'tuning' / 'optuna.db'}"


def open_storage(url):
    """Optuna's database storage with heartbeats (created if need be)."""
    engine = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else \
        {"pool_pre_ping": True}
    for attempt in range(3):  # two workers creating the tables at once: one loses, retries
        try:
            with store.store_lock(url):
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_SECONDS,
                    grace_period=GRACE_SECONDS,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=2))
        except (sqlalchemy.exc.SQLAlchemyError, ValueError, ImportError) as error:
            if attempt == 2 or isinstance(error, (ValueError, ImportError,
                                                  sqlalchemy.exc.ArgumentError)):
                raise ConfigError(f"Cannot open the study storage {url}: "
                                  f"{str(error).splitlines()[0]}") from None
            time.sleep(1 + attempt)


def default_study_name(lesson, config, settings):
    """The same command names the same study, so rerunning it continues the study."""
    key = cache.settings_key({"config": _config_fields(config), **settings.spec()})
    return f"{lesson.experiment}-{lesson.run_name(config)}-{key}"


def open_study(lesson, config, settings, storage, name):
    """Creates the study and its MLflow parent run, or joins them; returns (study, parent id)."""
    spec = {"lesson": lesson.experiment, "config": _config_fields(config), **settings.spec()}
    try:
        study = optuna.create_study(study_name=name, storage=storage,
                                    direction=settings.direction)
        study.set_user_attr("spec", spec)
        if settings.sampler == "grid":  # every combination of the choices once (`--sweep`)
            for values in itertools.product(*(d.choices for d in settings.space)):
                study.enqueue_trial({d.name: v for d, v in zip(settings.space, values,
                                                               strict=True)})
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage)
        created = False
    _check_same_study(storage, spec, name)
    return study, parent_run(lesson, config, settings, storage, name, created)


def _config_fields(config):
    return json.loads(json.dumps({k: v for k, v in dataclasses.asdict(config).items()
                                  if k != "distribution"}, default=str))


def _check_same_study(storage, spec, name):
    for _ in range(60):  # its creator sets it right after creating the study
        started = optuna.load_study(study_name=name, storage=storage).user_attrs.get("spec")
        if started is not None:
            break
        time.sleep(1)
    if started is None:
        raise ConfigError(f"Study {name!r} exists but was not made by a tune step; "
                          "give another --study name.")
    differs = sorted(key for key in spec if started.get(key) != spec[key])
    if differs:
        raise ConfigError(f"Study {name!r} explores a different {', '.join(differs)} "
                          f"(it has: {json.dumps({k: started.get(k) for k in differs})[:600]}); "
                          "run the command that started it, or give a new --study name.")


def parent_run(lesson, config, settings, storage, name, created):
    """The study's MLflow parent run id; the study's creator makes it, joiners wait for it."""
    experiment = store.use_experiment(lesson.experiment)
    client = mlflow.MlflowClient()
    for _ in range(1 if created else 20):  # a creator that crashed: 20 s, then ours
        study = optuna.load_study(study_name=name, storage=storage)
        run_id = study.user_attrs.get(PARENT_ATTR)
        if run_id and _run_exists(client, run_id):
            return run_id
        if not created:
            time.sleep(1)
    run = client.create_run(experiment.experiment_id, run_name=f"tune-{lesson.run_name(config)}",
                            tags={"tune": "true", "optuna_study": name,
                                  "git_commit": tracking.git_commit(),
                                  **({"sweep": "true"} if settings.sampler == "grid" else {})})
    params = {"metric": settings.metric, "direction": settings.direction,
              "space": "; ".join(settings.spec()["space"])[:6000], "sampler": settings.sampler,
              "pruner": settings.pruner, "trials": settings.trials}
    client.log_batch(run.info.run_id, params=[mlflow.entities.Param(key, str(value))
                                              for key, value in params.items()])
    client.log_dict(run.info.run_id, _config_fields(config), "base_config.json")
    study.set_user_attr(PARENT_ATTR, run.info.run_id)
    return run.info.run_id


def _run_exists(client, run_id):
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except mlflow.exceptions.MlflowException:
        return False  # the study outlived its MLflow store, or the run was deleted


# ## Trials


class TrialPruned(optuna.TrialPruned):
    """Raised from the epoch hook: the trial's run stops after a checkpoint."""


def objective(study, config, settings, parent_id, train_trial):
    """The function Optuna calls per trial: trains one config, returns its metric."""

    def run_trial(trial):
        values = {dimension.name: dimension.suggest(trial) for dimension in settings.space}
        trial_config = apply_overrides(config, values)
        tags = {"optuna_study": study.study_name, "optuna_trial": str(trial.number)}
        report = EpochReport(trial, settings.metric)
        print(f"\nTrial {trial.number}: {describe_values(values)}", flush=True)
        try:
            run_id = train_trial(trial_config, parent_id, tags, report)
        except TrialPruned:
            _mark_pruned(report.run_id)
            print(f"Trial {trial.number} pruned after epoch {report.epochs}.", flush=True)
            raise
        except KeyboardInterrupt:  # Optuna records the trial failed: it was stopped
            trial.set_user_attr("stopped", True)
            study.enqueue_trial(values, skip_if_exists=False)  # resumes first on the next run
            raise
        trial.set_user_attr("mlflow_run_id", run_id)
        return final_value(run_id, settings.metric)

    return run_trial


class EpochReport:
    """The training's epoch hook for a trial: reports the metric, prunes if told to."""

    def __init__(self, trial, metric):
        self.trial, self.metric, self.run_id, self.epochs = trial, metric, None, 0

    def __call__(self, epoch, metrics):
        if self.run_id is None:
            self.run_id = mlflow.active_run().info.run_id
            self.trial.set_user_attr("mlflow_run_id", self.run_id)
        if self.metric not in metrics:
            names = ", ".join(sorted(name for name in metrics if name.startswith("val_")))
            raise ConfigError(f"This model's epochs have no {self.metric}; --metric is one "
                              f"of: {names}.")
        self.epochs = epoch + 1
        self.trial.report(metrics[self.metric], epoch + 1)
        if self.trial.should_prune():
            raise TrialPruned()


def final_value(run_id, metric):
    """The trial's value: `metric` at the epoch whose weights the run kept (lowest val_loss)."""
    metrics = ungrouped(mlflow.MlflowClient().get_run(run_id).data.metrics)
    return metrics.get(f"best_{metric}", metrics.get(metric))


def _mark_pruned(run_id):
    if run_id:
        client = mlflow.MlflowClient()
        client.set_tag(run_id, "trial_state", "PRUNED")
        client.set_terminated(run_id, "KILLED")


def sampler(settings, seed):
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "grid":  # the trials are the combinations queued by `open_study`
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(  # the constant liar keeps parallel workers apart
        n_startup_trials=min(10, max(3, settings.trials // 3)), multivariate=True,
        constant_liar=True, seed=seed)


def pruner(settings, epochs):
    if settings.pruner == "none":
        return optuna.pruners.NopPruner()
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(epochs, 1))
    return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_after_trials,
                                       n_warmup_steps=0)


def counted_trials(study):
    """Trials that use up the budget: finished (complete or pruned) and running."""
    states = (*DONE, optuna.trial.TrialState.RUNNING)
    return len(study.get_trials(deepcopy=False, states=states))


def work(study, storage, config, settings, parent_id, train_trial, worker=0):
    """Runs trials one after another until the study has `settings.trials` of them
    (counting those of other workers) or `max_minutes` are up."""
    deadline = time.monotonic() + 60 * settings.max_minutes if settings.max_minutes else None
    while True:
        optuna.storages.fail_stale_trials(study)  # a killed worker's trial: queued again
        if counted_trials(study) >= settings.trials:
            return
        if deadline and time.monotonic() >= deadline:
            print(f"Stopping: --max-minutes {settings.max_minutes:g} is up.", flush=True)
            return
        # seeded by study, worker and trial: studies and workers never sample in lockstep
        seed = int(cache.settings_key([study.study_name, worker, len(study.trials)])[:8], 16)
        trial_study = optuna.load_study(study_name=study.study_name, storage=storage,
                                        sampler=sampler(settings, seed),
                                        pruner=pruner(settings, config.epochs))
        trial_study.optimize(objective(trial_study, config, settings, parent_id, train_trial),
                             n_trials=1, catch=(), gc_after_trial=True)


# ## Several local workers


# a stopped worker's time to checkpoint its trial (its own forced stop comes first), then
# the parent's to log the study's summary: the parent's own forced stop comes after both
WORKER_STOP_SECONDS = STOP_GRACE_SECONDS + 1
SUMMARY_SECONDS = 10


def start_workers(command, count, log_dir):
    """`count` worker processes running `command + ["--worker", i]`, logging to files.
    Each gets an equal share of the CPU threads unless the user set them, leads its own
    process group (stopped whole) and, on Linux, is stopped when its parent dies. A stop
    of this process now waits for theirs (`stop_workers`) and logs the summary before
    it is forced."""
    ForcedStop.allow(WORKER_STOP_SECONDS + SUMMARY_SECONDS)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, (os.cpu_count() or 1) // count)))
    workers = []
    for index in range(count):
        log = open(log_dir / f"worker-{index}.log", "a")  # noqa: SIM115 (closed in wait_for)
        workers.append((subprocess.Popen([*command, "--worker", str(index)], stdout=log,
                                         stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=_stop_with_parent), log))
    print(f"Started {count} workers; their logs: {log_dir}/worker-*.log", flush=True)
    return workers


def wait_for(workers, study, settings):
    """Prints each trial as it ends until every worker exits; Ctrl-C stops them all
    (each checkpoints its trial, which the next run resumes)."""
    seen = set()
    try:
        while any(process.poll() is None for process, _ in workers):
            _print_new_trials(study, settings, seen)
            time.sleep(2)
    except KeyboardInterrupt:
        stop_workers(workers)
        raise
    finally:
        for _, log in workers:
            log.close()
    _print_new_trials(study, settings, seen)
    for process, log in workers:
        if process.returncode:
            lines = Path(log.name).read_text(errors="replace").splitlines() or [""]
            errors = [line for line in lines if line.startswith("error: ")]
            raise ConfigError(f"A tuning worker stopped with exit status {process.returncode}: "
                              f"{(errors or lines)[-1].removeprefix('error: ')} "
                              f"(its log: {log.name})")


def stop_workers(workers):
    """SIGTERM to every worker's group (each checkpoints its trial, queues it again and
    exits), then SIGKILL to any group still there after `WORKER_STOP_SECONDS` in all."""
    for process, _ in workers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_SECONDS
    for process, _ in workers:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            servers.stop(process, timeout=1)


def _stop_with_parent():
    """In a new worker (Linux): SIGTERM when the parent dies, however it ends."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


def _print_new_trials(study, settings, seen):
    for trial in study.get_trials(deepcopy=False, states=DONE):
        if trial.number not in seen:
            seen.add(trial.number)
            value = ("pruned after epoch " + str(trial.last_step)
                     if trial.state == optuna.trial.TrialState.PRUNED
                     else f"{settings.metric} {trial.value:.4f}")
            print(f"Trial {trial.number}: {value} ({describe_values(trial.params)})", flush=True)


def tune(lesson, config, settings, train_trial, work_dir=None, worker_command=None,
         worker=None):
    """The `tune` step: opens (or joins) the study, runs its trials here or in
    `settings.workers` processes, and summarizes it. Returns the summary (None for
    a worker started by another `tune`)."""
    storage_url = settings.storage or default_storage(work_dir)
    name = settings.study or default_study_name(lesson, config, settings)
    storage = open_storage(storage_url)
    study, parent_id = open_study(lesson, config, settings, storage, name)
    if worker is None:
        print(f"Tuning: study {name} in {storage_url}\n  parent run {parent_id}, up to "
              f"{settings.trials} trials of {settings.metric} ({settings.direction}) over\n  "
              + "\n  ".join(settings.spec()["space"])
              + f"\nfrom the config:\n{describe(config)}", flush=True)
    started = time.monotonic()
    try:
        if settings.workers > 1 and worker is None:
            command = [*worker_command, "--study", name, "--storage", storage_url]
            workers = start_workers(command, settings.workers,
                                    cache.work_dir(work_dir) / "tuning" / name)
            wait_for(workers, study, settings)
        else:
            work(study, storage, config, settings, parent_id, train_trial, worker or 0)
    except BaseException as error:  # the parent run says how the study ended
        if worker is None:
            summarize(study, parent_id, settings, time.monotonic() - started,
                      "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        raise
    if worker is not None:
        return None
    return summarize(study, parent_id, settings, time.monotonic() - started)
