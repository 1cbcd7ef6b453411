"""What a lesson gives the core: its `Lesson` (configs, data, training plan,
comparison), and for each run a `TrainingPlan` with its `ModelExport`.

Light on purpose: a lesson declares its command line with these before any heavy
library is loaded, so `--help` answers at once.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflows.core.config import Catalog


@dataclass(frozen=True)
class Lesson:
    """What the core needs to know about a lesson."""

    experiment: str  # the MLflow experiment, and the run folders' parent
    catalog: Catalog
    load_data: Callable  # (config, data_path, work_dir) -> data with a `fingerprint`
    plan_training: Callable  # (config, data) -> TrainingPlan
    compare_columns: tuple  # MLflow columns of the `compare` table
    sort_by: str  # default `compare` order, best first
    ascending: bool = False  # True when lower is better (perplexity)
    complete_config: Callable | None = None  # config -> config, once the CLI has read it

    def run_name(self, config):
        model = getattr(config, self.catalog.key)
        return f"{model}-{config.preset}" if self.catalog.has_presets else model


@dataclass(frozen=True)
class ModelExport:
    """How a trained model leaves its run folder: saved there, then logged as a pyfunc."""

    artifact: str  # file or folder name, in the run folder and in the pyfunc's artifacts
    save: Callable[[Path], Any]  # writes the artifact at the given path
    python_model: Path  # the models-from-code pyfunc file
    input_example: list
    packages: tuple = ()  # subpackages of workflows/ the pyfunc imports
    params: dict | None = None  # the params schema (name -> default) callers may tune
    requirements: tuple = ()  # pinned packages it needs (default: models.model_requirements)


@dataclass
class TrainingPlan:
    """One training run as a lesson describes it."""

    model: Any  # a compiled keras.Model
    train_batches: Callable[[int], Any]  # epoch -> that epoch's batches (same on every call)
    validation_batches: Any
    train_examples: int
    export: ModelExport
    tags: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # beyond the config's fields
    artifacts: dict = field(default_factory=dict)  # logged at the start: name -> text or dict
    metrics: dict = field(default_factory=dict)  # logged at the start
    epoch_end: Callable[[int, dict], None] | None = None  # adds metrics to an epoch's dict
    curves: tuple = ("loss", "accuracy")  # metrics drawn in the learning curves
    time_budget_seconds: float | None = None
    average_last_epochs: int = 0  # >1: export the mean of the last N epochs' weights if
    # its validation loss beats the best epoch's
