"""The command line of every lesson, declared in a few lines with `LessonCLI`.

Written once here: data location flags, model, preset and config selection, `train` with
sweeps and `--register`, run selection (`--run-id`, `--model-uri`, a lesson's run filters),
texts from arguments or a file (`step_inputs.py`), `tune`, `compare`, `register`, `serve`, `export` (`run`:
`whole_lesson.py`), and the error policy (a user error: one line, exit status 2)."""

import argparse
import dataclasses
import sys
from pathlib import Path

from data_prep.sources import add_location_arguments
from process.commands import import_backend
from process.errors import run_command
from workflows.core import export, tuning_space
from workflows.core.config import (
    TRAINING_OPTIONS,
    ConfigError,
    TrainingOptions,
    applicable_fields,
)
from workflows.core.config_files import tune_block
from workflows.core.lesson import DataPlace, TrainRequest
from workflows.core.server_flags import add_model_server_flags, serving_limits
from workflows.core.step_inputs import accepted_values, add_config_arguments, overrides_from_args


class LessonCLI:
    """A lesson's steps as subcommands, each with `--help`.

    `shortcuts` names the config fields that get a flag of their own (`direction` ->
    `--direction`), with the help their `option()` declares; every shared training option
    (`TrainingOptions`: `--epochs`, `--max-train-minutes`, ...) has one too. `switches`
    are those of on/off fields (`--attention`, no value). `flag_checks` maps a step
    flag's name to its check, run before the step loads anything (a mistake answers at
    once). `run_filters` (a subset) are also flags of the steps that load a run's model:
    the latest run trained with that value is taken. `data_options` names the lesson's
    own data flags, which `data_arguments(parser)` adds to every step that reads data;
    they reach the lesson in `DataPlace.options`.
    """

    def __init__(self, lesson, module, description, source, shortcuts=(), switches=(),
                 run_filters=(), flag_checks=None, data_options=(), data_arguments=None):
        self.lesson, self.source, self.module = lesson, source, module
        self.argv = []
        self.data_options, self.data_arguments = data_options, data_arguments
        training = {field.name: field.metadata.get("help")  # (on/off ones: with --set)
                    for field in dataclasses.fields(TrainingOptions) if field.type != "bool"
                    and field.type is not bool}
        self.shortcuts = {**{name: lesson.catalog.field_help(name) for name in shortcuts},
                          **training}
        self.switches = switches  # the shortcuts of on/off fields: flags without a value
        # flag -> its check (raises `ConfigError`), run before the step loads anything
        self.flag_checks = flag_checks or {}
        self.run_filters = run_filters
        self.parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                              description=description)
        self.steps = self.parser.add_subparsers(dest="step", required=True)
        self.handlers, self.checks, self.one_process_steps = {}, {}, set()

    def step(self, name, help_text, handler, *, data=False, train=None, model=False,
             texts=None, check=None, one_process=False):
        """Adds a step; `data` adds the data flags (`"source"`: the source's location
        only, not the lesson's own data flags); `train` is "one" or "many" (models) to
        train, or "config" (one model's config, nothing trained); `texts` names the
        inputs; `check(args)` refuses a mistake in them before the step loads anything;
        `one_process`: refused under several processes (they share one training)."""
        parser = self.steps.add_parser(name, help=help_text, description=help_text)
        if data:
            add_location_arguments(parser, self.source)
            if self.data_arguments and data != "source":
                self.data_arguments(parser)
        if name == "prepare":
            parser.add_argument("--verify", action="store_true",
                                help="first hash every prepared file of the work folder again "
                                     "(a load checks sizes and times only) and remove what is "
                                     "damaged, to be built again")
        if train:
            self._add_train_arguments(parser, train, step=name)
        if texts:
            parser.add_argument("texts", nargs="*", help=texts)
            parser.add_argument("--file", help=f"a UTF-8 text file, one per line ({texts})")
        if model:
            which = parser.add_mutually_exclusive_group()
            which.add_argument("--run-id", help="an MLflow run id or its first characters, as "
                                                "`compare` prints it (default: the latest run)")
            which.add_argument("--model-uri", help="a registered model, e.g. models:/NAME/latest "
                                                   "or models:/NAME@ALIAS")
            self._add_run_filters(parser, "the latest run trained with this {} (default: "
                                          "the latest run)")
        self.handlers[name] = handler
        self.one_process_steps |= {name} if one_process else set()
        if check:
            self.checks[name] = check
        return parser

    def shared_steps(self):
        """`tune` (an Optuna study of the config), `compare`, `register` and `serve`, the
        same in every lesson."""
        tuning_space.add_tuning_arguments(self.step(
            "tune", "hyperparameter tuning with Optuna: trials in parallel, each an "
            "MLflow child run of the study's run", self.tune, data=True, train="one",
            one_process=True))
        self.step("settings", "every setting of a model (and preset): value, what it "
                  "accepts and what it does; set them with --set NAME=VALUE",
                  self.settings, train="config")
        step = self.step("compare", "table of this lesson's runs, best first", self.compare)
        step.add_argument("--sort-by", default=self.lesson.sort_by,
                          help=f"an MLflow column (default: {self.lesson.sort_by})")
        step.add_argument("--ascending", action="store_true", default=None,
                          help="lowest first (default: best first)")
        if self.lesson.catalog.key == "model":  # else the key is a run filter
            step.add_argument("--model", help="only runs of this model")
        step.add_argument("--since", help="only runs started on or after this date")
        step.add_argument("--format", choices=("text", "csv", "markdown"), default="text")
        self._add_run_filters(step, "only runs with this {}")
        step = self.step("register", "register a run's model in the model registry",
                         self.register)
        step.add_argument("name", help="registered model name; each call adds a version")
        step.add_argument("--run-id", help="an MLflow run id or its first characters, as "
                                           "`compare` prints it (default: the latest run)")
        step.add_argument("--alias", help="also point this alias at the new version "
                                          "(models:/NAME@ALIAS)")
        add_model_server_flags(self.step("serve", "serve a run's model over HTTP (MLflow's "
                                         "scoring server)", self.serve, model=True))
        export.add_export_arguments(self.step(
            "export", "a run's model as ONNX, a SavedModel or LiteRT (int8 if asked), logged "
            "to the run, with how to call it", lambda args: export.export_step(
                self.lesson, lambda: self.model_run(args), args), model=True))

    def main(self, argv=None):
        """Parses `argv` and runs the step; returns the exit status."""
        self.argv = list(sys.argv[1:] if argv is None else argv)
        args = self.parser.parse_args(self.argv)
        return run_command(self._run_step, args)

    def _run_step(self, args):
        from workflows.core import store

        if getattr(args, "sweep", None) and args.step != "train":
            raise ConfigError("--sweep works with the train step.")
        if hasattr(args, "overrides"):  # a config mistake is reported first
            self.check_config(args)
        for name, check in self.flag_checks.items():
            if getattr(args, name, None) is not None:
                check(getattr(args, name))
        if args.step in self.checks:
            self.checks[args.step](args)
        if args.step not in MODELLESS_STEPS:
            self._use_devices(args)
        if getattr(args, "verify", False):
            verify_work_folder(args.work_dir)
        if args.step not in STORELESS_STEPS:
            store.check_store()  # before any data is read
        try:
            self.handlers[args.step](args)
        except Exception as error:
            gone = store.deleted_sqlite_store()
            if gone:
                raise store.StoreError(
                    f"The tracking store {gone} was deleted while the command ran: its runs "
                    "are lost, the run folders in the work folder are not. Point "
                    "MLFLOW_TRACKING_URI at a copy of the store, or train again with --retrain."
                ) from error
            if not store.is_store_failure(error):
                raise
            store.give_up_on_store()
            raise store.StoreError(
                f"The tracking store {store.redacted(store.tracking_uri())} "
                "stopped answering. Nothing is lost: once it is back, rerun the same command (a "
                "training resumes from its last checkpoint).") from error
        return 0

    def check_config(self, args):
        """Builds the step's configs (not completed from other runs): a mistake in them
        is one line before anything is loaded."""
        models = getattr(args, self.lesson.catalog.key, None)
        if models is not None:
            self.configs(args, models if isinstance(models, list) else None, complete=False)

    def _use_devices(self, args):
        """The backend's library imported (TensorFlow with its start-up noise muted);
        refuses what several processes cannot share; opens the compiled-program cache."""
        import_backend()
        from workflows.core import compilation, devices

        one_process = args.step in self.one_process_steps or getattr(args, "sweep", None)
        if one_process and devices.process_count() > 1:
            raise ConfigError(
                "Several processes (KERAS_DISTRIBUTION_NUM_PROCESSES) train one config: use "
                "the train step, then evaluate in one process (README: Scale out).")
        compilation.use_persistent_cache(getattr(args, "work_dir", None))

    # ## Shared steps

    def train(self, args):
        """`train`: one config, or a sweep of it; `--register` afterwards."""
        from workflows.core import runs

        (config,) = self.configs(args)
        if args.sweep:  # a grid: every combination, one child run each
            space, points = tuning_space.sweep_space(args.sweep)
            settings = tuning_space.make_settings(config, space, trials=points,
                                                  sampler="grid", pruner="none")
            self._study(args, config, settings)
            runs.compare(self.lesson, model=config.model)
            return
        self.train_config(args, config)

    def train_config(self, args, config, parent_run_id=None):
        from workflows.core import devices, runs, tracking, training

        run_id = training.train_lesson(self.lesson, config, self.data_place(args), TrainRequest(
            args.retrain, tracking.child_tags(parent_run_id)))
        if args.register and devices.process_index() == 0:
            runs.register_model(run_id, args.register)
        return run_id

    def tune(self, args):
        """`tune`: checks the space, then runs (or joins) the study; `--register` the
        best trial."""
        if args.retrain:
            raise ConfigError(f"--retrain does not apply to {args.step}; give a new --study "
                              "name to tune again from scratch.")
        (config,) = self.configs(args)
        defaults = self.lesson.tuning_defaults
        settings = tuning_space.make_settings(
            config, args.space, tune_block(args.config), trials=args.trials,
            metric=args.metric or defaults.get("metric"),
            direction=args.direction or defaults.get("direction"),
            max_minutes=args.max_minutes, sampler=args.sampler,
            pruner=args.pruner or defaults.get("pruner"),
            prune_after_trials=args.prune_after_trials, workers=args.workers,
            study=args.study, storage=args.storage)
        if args.worker is None:  # prepares the data once, before any worker starts
            self.lesson.load_data(config, self.data_place(args))
        self._study(args, config, settings, args.worker)

    def _study(self, args, config, settings, worker=None):
        """Runs (or joins) the study of `settings`; `--register` its best trial."""
        from workflows.core import runs, tracking, training, tuning

        def train_trial(trial_config, parent_run_id, tags, after_epoch):
            return training.train_lesson(self.lesson, trial_config, self.data_place(args), TrainRequest(
                tags={**tracking.child_tags(parent_run_id), **tags}, after_epoch=after_epoch))

        given = {name: str(Path(value).resolve()) if Path(str(value)).exists() else str(value)
                 for name, value in self.data_place(args).options.items() if value}
        settings = dataclasses.replace(settings, data=tuple(sorted(given.items())))
        summary = tuning.tune(self.lesson, config, settings, train_trial, args.work_dir,
                             [sys.executable, "-m", self.module, *self.argv], worker)
        if summary and summary.get("best_run_id"):
            print(f"Use the best trial: python -m {self.module} evaluate --run-id "
                  f"{summary['best_run_id'][:12]}  (register and serve it the same way)")
            if args.register:
                runs.register_model(summary["best_run_id"], args.register)

    def settings(self, args):
        """Prints the settings that apply to the chosen model: the shared training ones,
        then the model's own, each with its value, what it accepts and its help."""
        config = self.configs(args, complete=False)[0]
        rows = [(item.name in TRAINING_OPTIONS, item.name, getattr(config, item.name),
                 accepted_values(item), item.metadata.get("help", ""))
                for item in dataclasses.fields(config) if item.metadata
                and item.metadata.get("applies", lambda c: True)(config)]
        print(f"Settings of {self.lesson.run_name(config)} (--set NAME=VALUE):")
        for shared, title in ((True, "training, shared by every model"),
                              (False, "this model's own")):
            print(f"\n{title}:")
            for _, name, value, accepts, text in (row for row in rows if row[0] == shared):
                print(f"  {name} = {value}  [{accepts}]\n      {text}")

    def compare(self, args):
        from workflows.core import runs

        runs.compare(self.lesson, args.sort_by, getattr(args, "model", None), args.since,
                     args.format, args.ascending, self.run_params(args))

    def register(self, args):
        from workflows.core import runs

        runs.register(self.lesson, args.run_id, args.name, args.alias)

    def serve(self, args):
        from workflows.core import models, servers

        servers.serve(args.model_uri or models.model_uri(self.model_run(args).info.run_id),
                      args.host, args.port, args.workers, serving_limits(args), args.export)

    def model_run(self, args):
        """The run with a model that `--run-id`, `--model-uri` and the run filters name."""
        from workflows.core import runs

        return runs.check_has_model(runs.model_run(self.lesson, args.run_id, args.model_uri,
                                                   self.run_params(args)))

    # ## Reading arguments

    def data_path(self, args):
        """The path given to the lesson's data flag (None: none given, or no source)."""
        if self.source is None:
            return None
        return getattr(args, self.source.flag.lstrip("-").replace("-", "_"), None)

    def data_place(self, args):
        """Where the step's data comes from, as the lesson's hooks read it."""
        return DataPlace(self.data_path(args), args.work_dir,
                         {name: getattr(args, name, None) for name in self.data_options})

    def run_params(self, args):
        """`{field: value}` of the run filters given on the command line."""
        return {name: getattr(args, name) for name in self.run_filters
                if getattr(args, name, None) is not None}

    def step_shortcuts(self, step):
        """The shortcut flags of a training step; in `tune`, its own `--direction`
        (the metric's) wins over a config field of that name (set it with --set)."""
        if step != "tune":
            return self.shortcuts
        return {name: text for name, text in self.shortcuts.items()
                if name not in TUNE_OWN_FLAGS}

    def configs(self, args, models=None, complete=True):
        """One config per model; with several models, each override goes to those it
        applies to. `complete`: as the lesson completes them (which may read runs)."""
        overrides = overrides_from_args(args)
        for name in self.step_shortcuts(args.step):
            value = getattr(args, name)
            if value is not None:
                overrides[name] = value
        catalog, preset = self.lesson.catalog, getattr(args, "preset", None)
        models = models or [getattr(args, catalog.key)]
        complete = self.lesson.complete_config if complete else (lambda config: config)
        if len(models) == 1:
            return [complete(catalog.make(models[0], preset, overrides))]
        applicable = {model: catalog.applicable_overrides(model, preset, overrides)
                      for model in models}
        unused = [key for key in overrides if not any(key in a for a in applicable.values())]
        if unused:
            fields = sorted({name for model in models
                             for name in applicable_fields(catalog.base(model, preset))})
            raise ConfigError(f"Unknown config field(s) {', '.join(unused)} for "
                              f"{', '.join(models)}; valid fields: {', '.join(fields)}.")
        return [complete(catalog.make(model, preset, applicable[model])) for model in models]

    def _add_run_filters(self, parser, help_text):
        for field in self.run_filters:
            parser.add_argument("--" + field.replace("_", "-"),
                                choices=self.lesson.catalog.choices(field),
                                help=help_text.format(field))

    def _add_train_arguments(self, parser, step_kind, step):
        catalog, many = self.lesson.catalog, step_kind == "many"
        names = ", ".join(catalog.models)
        if catalog.key != "model":  # the retrieval lesson's `--retriever`
            parser.add_argument("--" + catalog.key, default=catalog.models[0],
                                help=f"one of: {names} (default {catalog.models[0]})")
        elif catalog.has_presets:
            parser.add_argument("--model", default=catalog.models[0], help=f"one of: {names}")
            parser.add_argument("--preset", default=catalog.default_preset,
                                help=f"one of: {', '.join(catalog.presets[catalog.models[0]])}")
        elif many:
            parser.add_argument("--model", action="append",
                                help=f"one of: {names} (repeatable)")
        elif len(catalog.models) == 1:
            parser.add_argument("--model", default=catalog.models[0], help=f"one of: {names}")
        else:
            parser.add_argument("--model", required=True, help=f"one of: {names}")
        for name, help_text in self.step_shortcuts(step).items():
            flag = "--" + name.replace("_", "-")
            if name in self.switches:
                parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text)
            else:
                parser.add_argument(flag, metavar=name.upper(),
                                    help=help_text or f"sets the config field {name}")
        if step_kind != "config":
            parser.add_argument("--retrain", action="store_true",
                                help="train again even if this exact config already finished")
            parser.add_argument("--register", metavar="NAME",
                                help="register the trained model in the MLflow model registry")
        add_config_arguments(parser)


TUNE_OWN_FLAGS = ("direction",)
STORELESS_STEPS = ("prepare",)
MODELLESS_STEPS = ("compare", "register", "serve")  # no Keras, no devices


def verify_work_folder(work_dir=None):
    """`prepare --verify`: every prepared entry and cache file hashed again."""
    from data_prep import cache

    removed = cache.verify_work_folder(work_dir)
    for line in removed:
        print(f"Removed {line}")
    print(f"Verified {cache.work_dir(work_dir)}: "
          + (f"{len(removed)} damaged, to be built again." if removed else "every file intact."))
