"""What a lesson gives the command line and the shared steps: its `Lesson` (configs,
training, comparison), and for each trained model its `ModelExport`.

Light on purpose: a lesson declares its command line with these before any heavy
library is loaded, so `--help` answers at once.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflows.core.config import Catalog


@dataclass(frozen=True)
class Lesson:
    """What the core needs to know about a lesson."""

    experiment: str  # the MLflow experiment, and the run folders' parent
    catalog: Catalog
    train: Callable | None  # (config, data_path, work_dir, retrain, tags, after_epoch) -> run id
    load_data: Callable | None  # (config, data_path, work_dir): prepares what `train` reads
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
