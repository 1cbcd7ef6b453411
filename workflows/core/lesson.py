"""The lesson contract: what a lesson gives the core, and the registry of lessons.

A lesson is one module of `workflows/` that declares `LESSON`, an instance of a
`Lesson` subclass. Its hooks follow the order a lesson reads in:

    load_data(config, place)          -> the data (`LessonData`: its `fingerprint`)
    datasets(config, data, place)     -> the `RunDataset`s it trains and validates on
    build(config, data, place)        -> `Built`: the model (or retriever) and what the
                                         run logs when it starts
    fit(training, config, data, built) -> trains through `training` (a `TrainingRun`)
    export(config, data, built)       -> `ModelExport`: how the trained model leaves

`training.train_lesson(lesson, config)` runs them through the one lifecycle: the run
folder and its lock, a new or resumed MLflow run, resumable fitting with the shared
training options (`config.TrainingOptions`), the export and the finished mark. Its
steps on the command line are `cli.LessonCLI`'s. `docs/adding_a_lesson.md` walks
through a new one.
"""

import abc
import ast
import dataclasses
import hashlib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from workflows.core.config import NOT_IN_RUN_FOLDER, Catalog, ConfigError, TrainingOptions

WORKFLOWS = Path(__file__).resolve().parents[1]  # the folder of the lesson modules


@dataclass(frozen=True)
class DataPlace:
    """Where a lesson's data comes from: the source's file or folder (None: its
    environment variable, then the cache, then the download), the work folder, and the
    lesson's own data options (the retrieval lesson's catalogue files)."""

    path: str | None = None
    work_dir: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


class LessonData(Protocol):
    """What `load_data` returns, as the core reads it (the rest is the lesson's own)."""

    fingerprint: str  # changes with the data: part of the run folder's name, logged


@dataclass(frozen=True)
class TrainRequest:
    """How one `train` runs: `retrain` a finished config, the new run's MLflow `tags` (a
    study's trial: its parent), `after_epoch(epoch, metrics)` (a study's pruner)."""

    retrain: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    after_epoch: Callable | None = None


@dataclass
class Built:
    """What `build` gives the run: the Keras `model` that `fit` trains (None when it
    builds what it trains later, or trains nothing: a BM25 index), the lesson's own
    `parts` that `fit` and `export` use, and what a new run logs when it starts."""

    model: Any
    parts: Any = None
    params: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    artifacts: dict = field(default_factory=dict)  # name -> text or dict
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunDataset:
    """A dataset a run reads, as MLflow's Dataset column shows it: `name` (the corpus and
    its split), `digest` (the kit's own fingerprint of it), `source` (its file or
    folder), `context` (training, validation or test) and its `rows`."""

    name: str
    digest: str
    source: str
    context: str
    rows: int


def dataset_digest(*parts):
    """A short digest of what identifies a dataset (a fingerprint, a split)."""
    from data_prep.cache import settings_key

    return settings_key(list(parts))


@dataclass(frozen=True)
class ModelExport:
    """How a trained model leaves its run folder: saved there, then logged as a pyfunc."""

    artifact: str  # file or folder name, in the run folder and in the pyfunc's artifacts
    save: Callable[[Path], Any]  # writes the artifact at the given path
    python_model: Path  # the models-from-code pyfunc file
    input_example: list
    packages: tuple = ()  # subpackages of workflows/ the pyfunc imports
    params: dict | None = None  # the params schema (name -> default) callers may tune
    # the packages it needs beyond Keras, keras-hub, MLflow and the backend it trained on
    requirements: tuple = ()


class Lesson(abc.ABC):
    """A lesson as the core runs it. Subclasses set the class attributes and the five
    hooks (`load_data`, `datasets`, `build`, `fit`, `export`); `complete_config` and
    `data_identity` have defaults."""

    experiment: str  # the MLflow experiment, and the run folders' parent
    catalog: Catalog
    compare_columns: tuple  # MLflow columns of the `compare` table
    sort_by: str  # default `compare` order, best first
    ascending: bool = False  # True when lower is better (perplexity)
    packages: tuple = ()  # the subpackages of `workflows/` that are this lesson's own
    tuning_defaults: Mapping[str, Any] = {}  # the tune step's metric, direction, pruner
    # the `export` step's (module, artifact): `module.exportable(run, folder)` makes the
    # `core.export.Exportable` of the logged model's `artifacts/<artifact>` folder
    exported: tuple | None = None

    def run_name(self, config):
        """The MLflow run name: the model, and its preset where the catalog has presets."""
        model = getattr(config, self.catalog.key)
        return f"{model}-{config.preset}" if self.catalog.has_presets else model

    def run_label(self, config):
        """The MLflow run's name: `run_name`, then what the config changed from its
        catalog entry (`transformer-cpu epochs=8 label_smoothing=0.0`), so the runs table
        tells runs of one model apart; a short digest of the changes past 60
        characters."""
        name = self.run_name(config)
        preset = getattr(config, "preset", None) if self.catalog.has_presets else None
        try:
            base = self.catalog.base(getattr(config, self.catalog.key), preset)
        except ConfigError:  # a config no catalog entry names
            return name
        changed = " ".join(
            f"{item.name}={getattr(config, item.name)}" for item in dataclasses.fields(config)
            if item.name not in NOT_IN_RUN_FOLDER
            and getattr(config, item.name) != getattr(base, item.name, None))
        if len(name) + len(changed) > 60:
            changed = "changed " + hashlib.sha256(changed.encode()).hexdigest()[:8]
        return f"{name} {changed}" if changed else name

    def complete_config(self, config):
        """The config once the command line has read it (a lesson may fill in what it
        reads from other runs); unchanged by default."""
        return config

    @abc.abstractmethod
    def load_data(self, config: TrainingOptions, place: DataPlace) -> LessonData:
        """Prepares (or finds prepared) what `config` trains on; it has a `fingerprint`."""

    def data_identity(self, config: TrainingOptions, data: LessonData,
                      place: DataPlace) -> str:
        """What the run trained on, part of its folder's name: the data's fingerprint,
        and anything else it reads (a pretrained encoder's weights)."""
        return data.fingerprint

    @abc.abstractmethod
    def datasets(self, config: TrainingOptions, data: LessonData,
                 place: DataPlace) -> list[RunDataset]:
        """What a run of `config` trains and validates on (logged with the run)."""

    @abc.abstractmethod
    def build(self, config: TrainingOptions, data: LessonData, place: DataPlace) -> Built:
        """The model of `config` and what a new run logs when it starts."""

    @abc.abstractmethod
    def fit(self, training, config: TrainingOptions, data: LessonData,
            built: Built) -> None:
        """Trains `built` through `training.fit` (a custom trainer:
        `training.fit(..., model=)`); `training` is the lifecycle's `TrainingRun`, not an
        MLflow run."""

    @abc.abstractmethod
    def export(self, config: TrainingOptions, data: LessonData, built: Built) -> ModelExport:
        """How the trained model is saved and logged."""

    def exportable(self, run, folder):
        """What the `export` step writes of `run`'s model, whose logged pyfunc is in
        `folder`: a `core.export.Exportable` (`exported`)."""
        if self.exported is None:
            raise ConfigError(f"The {self.experiment} lesson has no export yet: serve its "
                              "models through MLflow (the serve step).")
        module, artifact = self.exported
        return importlib.import_module(module).exportable(
            run, Path(folder) / "artifacts" / artifact)


# ## The registry: every module of `workflows/` that declares `LESSON`


def lesson_names(folder=WORKFLOWS):
    """The lessons, by module name, found by reading (not importing) `workflows/*.py`:
    a module that assigns `LESSON` at its top level is one."""
    return sorted(path.stem for path in folder.glob("*.py") if _declares_lesson(path))


def load_lesson(name):
    """The `Lesson` of module `workflows.<name>`."""
    lesson = importlib.import_module(f"workflows.{name}").LESSON
    if not isinstance(lesson, Lesson):
        raise TypeError(f"workflows.{name}.LESSON is a {type(lesson).__name__}, not a Lesson")
    return lesson


def _declares_lesson(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Assign | ast.AnnAssign)
               and any(getattr(target, "id", None) == "LESSON"
                       for target in getattr(node, "targets", [getattr(node, "target", None)]))
               for node in tree.body)

