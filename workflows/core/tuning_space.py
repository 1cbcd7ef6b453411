"""What a study explores: spaces over a lesson's config fields, and its settings.

A dimension is written `FIELD=KIND:...`:

    learning_rate=loguniform:1e-4:3e-3   float, sampled on a log scale
    dropout=uniform:0.1:0.6              float
    units=int:16:128                     whole number (`int:16:128:16` steps by 16)
    max_tokens=logint:5000:200000        whole number on a log scale
    cell=choice:lstm,gru                 one of the listed values

A YAML `tune: {space: {...}}` block gives the same texts as a mapping (a choice
may also be a YAML list). Every dimension is checked against the config before any
run starts: the field must exist and apply, its kind must suit the field's type, and
both ends of a range (every value of a choice) must be valid values of the field.
"""

import argparse
import dataclasses
import math
import os
import typing
from dataclasses import dataclass

from workflows.core.config import (
    ConfigError,
    applicable_fields,
    apply_overrides,
    describe_choice,
    field_names,
)

KINDS = ("uniform", "loguniform", "int", "logint", "choice")
NOT_TUNABLE = ("model", "preset", "distribution")  # what a run is, not how it trains


@dataclass(frozen=True)
class Dimension:
    """One tuned field: a range of `kind` from `low` to `high`, or `choices`."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    step: int | None = None
    choices: tuple = ()

    def suggest(self, trial):
        """The value Optuna's `trial` proposes for this field."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind in ("int", "logint"):
            return trial.suggest_int(self.name, int(self.low), int(self.high),
                                     step=self.step or 1, log=self.kind == "logint")
        return trial.suggest_float(self.name, self.low, self.high,
                                   log=self.kind == "loguniform")

    def text(self):
        if self.kind == "choice":
            return f"{self.name}=choice:{','.join(map(str, self.choices))}"
        step = f":{self.step}" if self.step else ""
        return f"{self.name}={self.kind}:{self.low:g}:{self.high:g}{step}"


def parse_space(items):
    """Dimensions from `["field=kind:...", ...]` and/or a `{field: "kind:..."}` mapping."""
    if isinstance(items, dict):
        items = [f"{name}={_choice_text(spec)}" for name, spec in items.items()]
    dimensions = [parse_dimension(item) for item in items]
    names = [dimension.name for dimension in dimensions]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"--space gives {', '.join(repeated)} more than once.")
    return dimensions


def _choice_text(spec):
    if isinstance(spec, list):
        return "choice:" + ",".join(map(str, spec))
    return str(spec)


def parse_dimension(item):
    name, sep, spec = str(item).partition("=")
    name = name.strip().replace("-", "_")
    kind, _, rest = spec.strip().partition(":")
    if not sep or not name or kind not in KINDS or not rest:
        raise ConfigError(f"--space expects FIELD=KIND:..., with KIND one of {', '.join(KINDS)} "
                          f"(e.g. learning_rate=loguniform:1e-4:3e-3, units=choice:32,64), "
                          f"got {item!r}.")
    if kind == "choice":
        choices = tuple(value.strip() for value in rest.split(",") if value.strip())
        if not choices:
            raise ConfigError(f"--space {name}: give at least one value after choice:.")
        return Dimension(name, kind, choices=choices)
    parts = rest.split(":")
    whole = kind in ("int", "logint")
    if len(parts) not in ((2, 3) if whole else (2,)):
        form = "int:LOW:HIGH[:STEP]" if whole else f"{kind}:LOW:HIGH"
        raise ConfigError(f"--space {name}: expected {form}, got {spec!r}.")
    numbers = [_number(name, part, whole) for part in parts]
    low, high = numbers[:2]
    if not low < high:
        raise ConfigError(f"--space {name}: the low end must be below the high end, got {spec!r}.")
    if kind.startswith("log") and low <= 0:
        raise ConfigError(f"--space {name}: a {kind} range must be positive, got {spec!r}.")
    step = numbers[2] if len(numbers) == 3 else None
    if step is not None and (step < 1 or kind == "logint"):
        raise ConfigError(f"--space {name}: a step must be a whole number >= 1, and only "
                          f"int ranges take one; got {spec!r}.")
    return Dimension(name, kind, low, high, step)


def _number(name, text, whole):
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--space {name}: {text!r} is not a number.") from None
    if not math.isfinite(value) or (whole and not value.is_integer()):
        raise ConfigError(f"--space {name}: {text!r} must be a finite "
                          f"{'whole number' if whole else 'number'}.")
    return int(value) if whole else value


def check_space(space, config):
    """Refuses a space that `config` cannot take; returns the dimensions with their
    choices converted to the fields' types (what Optuna samples and MLflow logs)."""
    if not space:
        raise ConfigError("Give the space to explore: --space FIELD=KIND:... (repeatable), "
                          "or a `tune: {space: ...}` block in --config.")
    hints = typing.get_type_hints(type(config))
    tunable = [name for name in applicable_fields(config) if name not in NOT_TUNABLE]
    checked = []
    for dimension in space:
        if dimension.name not in field_names(config) or dimension.name in NOT_TUNABLE:
            raise ConfigError(f"--space {dimension.name}: not a tunable field of "
                              f"{describe_choice(config)}; fields: {', '.join(tunable)}.")
        checked.append(_check_dimension(dimension, config, _base_type(hints[dimension.name])))
    return checked


def _base_type(hint):
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return args[0] if args else hint


def _check_dimension(dimension, config, kind):
    if dimension.kind != "choice":
        fits = kind is float or (kind is int and dimension.kind in ("int", "logint"))
        if not fits:
            wanted = ("int, logint or choice" if kind is int
                      else "uniform, loguniform or choice" if kind is float else "choice")
            raise ConfigError(f"--space {dimension.name}: the field is a {kind.__name__}; "
                              f"use {wanted}, not {dimension.kind}.")
        values = (dimension.low, dimension.high)
    else:
        values = dimension.choices
    typed = []
    for value in values:
        try:
            changed = apply_overrides(config, {dimension.name: value})
        except ConfigError as error:
            raise ConfigError(f"--space {dimension.name}: {value!r} is not a valid value "
                              f"({error})") from None
        typed.append(getattr(changed, dimension.name))
    if dimension.kind == "choice":
        return dataclasses.replace(dimension, choices=tuple(typed))
    return dimension


@dataclass(frozen=True)
class TuningSettings:
    """What to tune and how; from the command line and/or a YAML `tune:` block."""

    space: tuple  # checked `Dimension`s
    metric: str = "val_loss"
    direction: str = "minimize"
    trials: int = 20
    max_minutes: float | None = None
    sampler: str = "tpe"
    pruner: str = "median"
    prune_after_trials: int = 3  # the median pruner judges no trial before this many finish
    workers: int = 1
    study: str | None = None
    storage: str | None = None
    data: tuple = ()  # the lesson's own data flags given (a user's texts), as (name, value)

    def spec(self):
        """What every worker of one study must agree on (its data too: a study of
        other texts is another study)."""
        spec = {"space": [d.text() for d in self.space], "metric": self.metric,
                "direction": self.direction}
        return {**spec, "data": dict(self.data)} if self.data else spec


SAMPLERS = ("tpe", "random", "grid")  # grid: every combination of choices (--sweep)
MAX_TRIALS = 100_000


def max_workers():
    """Local tuning workers: at most one per core (each trains a model)."""
    return os.cpu_count() or 1

PRUNERS = ("median", "hyperband", "none")


def default_direction(metric):
    lower_is_better = ("loss", "perplexity", "error")
    return "minimize" if any(word in metric for word in lower_is_better) else "maximize"


def make_settings(config, space_items, yaml_block=None, **flags):
    """Checked `TuningSettings`: `flags` (the command line, None where not given) win
    over the YAML block, which wins over the defaults."""
    block = dict(yaml_block or {})
    keys = [f.name for f in dataclasses.fields(TuningSettings) if f.name != "data"]
    unknown = set(block) - set(keys)
    if unknown:
        valid = ", ".join(keys)
        raise ConfigError(f"Unknown key(s) in the tune: block: {', '.join(sorted(unknown))}; "
                          f"valid: {valid}.")
    space = parse_space(space_items) if space_items else parse_space(block.pop("space", {}))
    block.pop("space", None)
    values = {**block, **{key: value for key, value in flags.items() if value is not None}}
    metric = str(values.get("metric", "val_loss"))
    if not metric.startswith("val_"):
        raise ConfigError(f"--metric must be a validation metric (val_loss, val_accuracy, "
                          f"...): tuning never looks at the test set; got {metric!r}.")
    values.setdefault("direction", default_direction(metric))
    settings = TuningSettings(space=tuple(check_space(space, config)), metric=metric,
                              **{k: v for k, v in values.items() if k != "metric"})
    _check_settings(settings)
    if settings.sampler == "grid":  # no more trials than combinations
        settings = dataclasses.replace(settings, trials=min(settings.trials, grid_points(settings)))
    return settings


def grid_points(settings):
    """The number of combinations of a grid; every dimension must be a choice."""
    ranges = [d.text() for d in settings.space if d.kind != "choice"]
    if ranges:
        raise ConfigError(f"--sampler grid takes choice dimensions only (FIELD=choice:A,B); "
                          f"got {', '.join(ranges)}.")
    return math.prod(len(d.choices) for d in settings.space)


def _check_settings(settings):
    rules = [(settings.direction in ("minimize", "maximize"),
              "--direction is minimize or maximize"),
             (settings.sampler in SAMPLERS, f"--sampler is one of {', '.join(SAMPLERS)}"),
             (settings.pruner in PRUNERS, f"--pruner is one of {', '.join(PRUNERS)}"),
             (isinstance(settings.trials, int) and settings.trials >= 1, "--trials is at least 1"),
             (isinstance(settings.workers, int) and 1 <= settings.workers <= max_workers(),
              f"--workers is from 1 to {max_workers()} (the cores of this machine; more "
              "workers join from other machines with --study and --storage)"),
             (settings.trials <= MAX_TRIALS, f"--trials is at most {MAX_TRIALS:,}"),
             (settings.max_minutes is None or settings.max_minutes > 0,
              "--max-minutes is positive"),
             (settings.prune_after_trials >= 0, "prune_after_trials is at least 0")]
    for holds, rule in rules:
        if not holds:
            raise ConfigError(f"{rule}.")


# ## The tune step's flags, and `--sweep` as a grid


def add_tuning_arguments(parser):
    parser.add_argument("--space", metavar="FIELD=KIND:...", action="append", default=[],
                        help="a tuned field (repeatable): FIELD=uniform:LOW:HIGH, "
                        "loguniform:LOW:HIGH, int:LOW:HIGH[:STEP], logint:LOW:HIGH or "
                        "choice:A,B,C (or a tune: {space: ...} block in --config)")
    parser.add_argument("--trials", type=int, help="trials in the study, all workers "
                        "together (default 20); rerunning continues up to this many")
    parser.add_argument("--metric", help="the validation metric to optimize (default "
                        "val_loss), e.g. val_accuracy, val_perplexity")
    parser.add_argument("--direction", choices=("minimize", "maximize"),
                        help="default: minimize for losses and perplexities, else maximize")
    parser.add_argument("--max-minutes", type=float, help="start no trial after this many "
                        "minutes")
    parser.add_argument("--sampler", choices=SAMPLERS, help="default: tpe")
    parser.add_argument("--pruner", choices=PRUNERS, help="stop poor trials after an "
                        "epoch (default: median)")
    parser.add_argument("--prune-after-trials", type=int, help="median pruner: prune nothing "
                        "until this many trials have finished (default 3)")
    parser.add_argument("--workers", type=int, help="worker processes on this machine "
                        "(default 1)")
    parser.add_argument("--study", help="study name; the same name and --storage on "
                        "another machine join the study (default: named after the command)")
    parser.add_argument("--storage", help="Optuna storage URL, e.g. postgresql://user@host/db "
                        "(default: beside the SQLite MLflow store, mlflow.db: mlflow.optuna.db)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # set for started workers


def sweep_space(items):
    """`["lr=1e-3,5e-4", "units=16,32"]` -> the grid's space
    `["lr=choice:1e-3,5e-4", "units=choice:16,32"]` and the number of its points."""
    space, points = [], 1
    for item in items:
        key, sep, values = item.partition("=")
        choices = [value.strip() for value in values.split(",") if value.strip()]
        if not sep or not key.strip() or not choices:
            raise ConfigError(f"--sweep expects KEY=V1,V2,..., got {item!r}.")
        space.append(f"{key.strip()}=choice:{','.join(choices)}")
        points *= len(choices)
    return space, points
