"""Typed run configurations: one idiom for every lesson.

A lesson describes its models with frozen dataclasses whose defaults reproduce the
tutorial. `option()` declares what a field accepts (a list of choices, or a range) and,
when the field matters only for some configs, when it applies. A `Catalog` names the
configs a user picks from (`--model`, and `--preset` where a lesson has presets).
Users change fields with `--config run.yaml` and/or `--set key=value` (repeatable);
every value is checked when the command line is read, before any data is loaded or
any run starts, so a typo never trains the wrong model. The training options every lesson
shares are declared once, in `TrainingOptions`, which each lesson's config extends.
"""

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass

from process.errors import UserError


class ConfigError(UserError):
    """A config names an unknown field or model, or has a bad value."""


# Ceilings no sane training passes: a value beyond them is a typo (1e11 epochs)
MAX_EPOCHS = 10_000
MAX_TRAIN_MINUTES_HELP = (
    "wall minutes for the whole train step, summed over its resumptions: compilation, "
    "validation, epoch-end work and the export count; no epoch starts that would not end "
    "in time with room left for the export (an epoch that runs over ends early)")
MAX_BATCH_SIZE = 65_536
MAX_LEARNING_RATE = 10.0
MAX_COUNT = 100_000_000  # any other whole-number field: tokens, steps, units, sizes
MAX_AMOUNT = 1_000_000.0  # any other real-number field without a ceiling of its own


def option(default, *, choices=None, at_least=None, above=None, at_most=None, below=None,
           applies=None, help=None, why=None):
    """A dataclass field with its valid values and, optionally, when it applies.

    `choices`: the allowed values. `at_least`/`at_most` are inclusive bounds,
    `above`/`below` exclusive ones. `applies(config)` says whether the field means
    anything for `config` (e.g. `latent_dim` only for the GRU translator); setting a
    field that does not apply is refused. `help` is its flag's help text; `why` ends the
    message that refuses a value (the reason for the bounds).
    """
    checks = {"choices": choices, "at_least": at_least, "above": above, "at_most": at_most,
              "below": below, "applies": applies, "help": help, "why": why}
    return dataclasses.field(default=default, metadata={k: v for k, v in checks.items()
                                                        if v is not None})


def when(field, *values):
    """An `applies` rule: the option means something when `field` is one of `values`."""
    return lambda config: getattr(config, field) in values


def unless(field, *values):
    """An `applies` rule: the option means something when `field` is none of `values`."""
    return lambda config: getattr(config, field) not in values


def all_of(*rules):
    """An `applies` rule: the option means something when every one of `rules` says so."""
    return lambda config: all(rule(config) for rule in rules)


# How a training spreads over devices (`core/devices.py` runs it)
DISTRIBUTIONS = ("none", "mirrored", "data_parallel")
DISTRIBUTION_HELP = (
    "none | mirrored (TensorFlow: every GPU of this machine) | data_parallel (JAX: every "
    "device of this machine, or of every process when KERAS_DISTRIBUTION_NUM_PROCESSES > "
    "1); batch_size is the global batch, split across devices")

# The precision a model computes in (`core/precision.py`: what "auto" picks)
DTYPE_POLICIES = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
# JAX's random generators for dropout (`core/precision.py`: `use_random_generator`)
RANDOM_GENERATORS = ("threefry", "rbg")


@dataclass(frozen=True)
class TrainingOptions:
    """The training settings of every lesson, declared once: each lesson's config
    extends this class (`training_option` gives a field a lesson's own default), the
    command line makes a flag of each field from its help, and `core/training.py` reads
    them, whatever the lesson."""

    epochs: int = option(10, at_least=1, at_most=MAX_EPOCHS,
                         help="the most epochs to train (early stopping may end sooner)")
    patience: int = option(2, at_least=1, help="epochs without a better validation score "
                           "before stopping early")
    max_train_minutes: float | None = option(None, above=0, help=MAX_TRAIN_MINUTES_HELP)
    average_epochs: int = option(0, at_least=0, help="checkpoint averaging: export the mean "
                                 "of the last N epochs' weights if its monitored "
                                 "validation score is better")
    checkpoint_every_steps: int = option(200, at_least=0, help="checkpoint every N batches "
                                         "too (0: only at the end of epochs)")
    seed: int = option(1337, at_least=0, at_most=2**32 - 1, help="the random seed of the "
                       "data order, the weights and dropout")
    distribution: str = option("none", choices=DISTRIBUTIONS, help=DISTRIBUTION_HELP)
    system_metrics: bool = option(True, help="record the machine's CPU, memory, disk, "
                                  "network and GPU use with the run every "
                                  "2 s (MLflow's system metrics); false: none")


# where and how a run trains, not what it trains: not part of its run folder's name
NOT_IN_RUN_FOLDER = ("distribution", "system_metrics")
TRAINING_OPTIONS = tuple(field.name for field in dataclasses.fields(TrainingOptions))


def training_option(name, default, **rules):
    """A lesson's own default (and, in `rules`, bounds or `applies`) for the shared
    training option `name`; its help stays the one declared in `TrainingOptions`."""
    shared = TrainingOptions.__dataclass_fields__[name].metadata
    return dataclasses.field(default=default, metadata={**shared, **rules})


class Catalog:
    """The configs of a lesson: `{model: {preset: config}}`.

    Lessons without presets give each model one preset, `default`. A config may be given
    as a function that returns it: its module loads when the model is first asked for.
    """

    def __init__(self, presets, default_preset="default", key="model"):
        self.presets, self.default_preset = presets, default_preset
        self.key = key  # the config field that names the model (`--model`, `--retriever`)

    @property
    def models(self):
        return list(self.presets)

    @property
    def has_presets(self):
        return any(len(presets) > 1 for presets in self.presets.values())

    def base(self, model, preset=None):
        """The config named by `model` and `preset`, unchanged."""
        preset = preset or self.default_preset
        if model not in self.presets:
            names = ", ".join(self.models)
            raise ConfigError(f"Unknown --{self.key} {model!r}; " + (
                f"valid models: {names}." if self.has_presets else f"choose one of: {names}."))
        if preset not in self.presets[model]:
            raise ConfigError(f"Unknown --preset {preset!r} for {model}; valid presets: "
                              f"{', '.join(self.presets[model])}.")
        config = self.presets[model][preset]
        if callable(config):
            config = self.presets[model][preset] = config()
        return config

    def make(self, model, preset=None, overrides=None):
        """The named config with `overrides` applied; each must apply to it and be valid.
        The model itself is chosen by name, never by an override."""
        overrides = dict(overrides or {})
        named = overrides.pop(self.key, model)
        if str(named) != model:
            raise ConfigError(f"{self.key}={named} in --set or --config: choose the "
                              f"{self.key} with --{self.key} {named} (this command trains "
                              f"{model}).")
        return apply_overrides(self.base(model, preset), overrides)

    def applicable_overrides(self, model, preset, overrides):
        """The subset of `overrides` that `model` has and that apply to it."""
        base = self.base(model, preset)
        known = {key: value for key, value in overrides.items() if key in field_names(base)}
        changed = apply_overrides(base, known, check_applies=False)
        return {key: value for key, value in known.items() if field_applies(changed, key)}

    def field_help(self, name):
        """The help a field declares (`option(help=...)`), from the first model that has it."""
        for model in self.models:
            for preset in self.presets[model]:
                for item in dataclasses.fields(self.base(model, preset)):
                    if item.name == name and item.metadata.get("help"):
                        return item.metadata["help"]
        return None

    def choices(self, name):
        """The values a field accepts (`option(choices=...)`), from any model's config;
        None: any value its checks take."""
        config = self.base(self.models[0], next(iter(self.presets[self.models[0]])))
        return _field(config, name).metadata.get("choices")

    def from_params(self, params):
        """The config a run logged as MLflow params (fields it does not know are ignored)."""
        base = self.base(params[self.key], params.get("preset"))
        known = {key: value for key, value in params.items()
                 if key in field_names(base) and key not in (self.key, "preset")}
        return apply_overrides(base, known, check_applies=False)


def field_names(config):
    return [field.name for field in dataclasses.fields(config)]


def field_applies(config, name):
    applies = _field(config, name).metadata.get("applies")
    return applies is None or applies(config)


def applicable_fields(config):
    return [name for name in field_names(config) if field_applies(config, name)]


def _field(config, name):
    return next(field for field in dataclasses.fields(config) if field.name == name)


def apply_overrides(config, overrides, check_applies=True):
    """A copy of dataclass `config` with `overrides` applied, type-checked and validated."""
    fields = field_names(config)
    hints = typing.get_type_hints(type(config))
    changes = {}
    for key, value in overrides.items():
        if key not in fields:
            raise ConfigError(f"Unknown config field {key!r} for {type(config).__name__}; "
                              f"valid fields: {', '.join(sorted(fields))}.")
        changes[key] = _coerce(key, value, hints[key])
    changed = dataclasses.replace(config, **changes)
    if check_applies:
        idle = [key for key in changes if not field_applies(changed, key)]
        if idle:
            raise ConfigError(
                f"{', '.join(idle)} {'does' if len(idle) == 1 else 'do'} not apply to "
                f"{describe_choice(changed)}; fields that do: "
                f"{', '.join(sorted(applicable_fields(changed)))}.")
    validate(changed)
    return changed


def describe_choice(config):
    parts = [getattr(config, "model", "") or type(config).__name__]
    if getattr(config, "preset", None):
        parts.append(f"(preset {config.preset})")
    return " ".join(parts)


def validate(config):
    """Raises `ConfigError` for the first field outside its choices or range."""
    for field in dataclasses.fields(config):
        value, rules = getattr(config, field.name), field.metadata
        problem = None if value is None else _problem(field.name, value, rules)
        if problem:
            raise ConfigError(" ".join(filter(None, [problem, rules.get("why")])))


def _problem(name, value, rules):
    if "choices" in rules and value not in rules["choices"]:
        return f"{name} must be one of {', '.join(map(str, rules['choices']))}, got {value!r}."
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} must be a finite number, got {value!r}."
    for rule, holds, words in (("at_least", value.__ge__, "at least"),
                               ("above", value.__gt__, "greater than"),
                               ("at_most", value.__le__, "at most"),
                               ("below", value.__lt__, "less than")):
        if rule in rules and not holds(rules[rule]):
            return f"{name} must be {words} {rules[rule]}, got {value!r}."
    ceiling = _default_ceiling(value, rules)
    if ceiling is not None and value > ceiling:
        return f"{name} must be at most {ceiling:,} (a sane range), got {value!r}."
    return None


def _default_ceiling(value, rules):
    """The ceiling of a numeric field that declares none (booleans have none)."""
    if "at_most" in rules or "below" in rules or "choices" in rules \
            or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return MAX_COUNT if isinstance(value, int) else MAX_AMOUNT


def _coerce(key, value, hint):
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    optional = union and type(None) in typing.get_args(hint)
    base = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    if value is None or (optional and isinstance(value, str) and value.lower() in ("", "none")):
        if optional:
            return None
        raise ConfigError(f"{key} cannot be empty.")
    try:
        if base is bool:
            return _to_bool(value)
        if base in (int, float):
            return _to_number(value, base)
        if not isinstance(value, (str, int, float)):
            raise ValueError(f"not a {base.__name__}")
        return base(value)
    except ValueError as error:
        raise ConfigError(f"{key} must be {base.__name__}, got {value!r} ({error}).") from None


def _to_number(value, kind):
    if isinstance(value, str) and value.strip().lower().lstrip("+-") in ("inf", "infinity",
                                                                         "nan"):
        raise ValueError("not a finite number")
    try:
        number = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        raise ValueError("not a number") from None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ValueError("not a number")
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    if kind is int and not float(number).is_integer():
        raise ValueError("not a whole number")
    return kind(number)


def _to_bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def describe(config):
    """The config as aligned `field = value` lines, to print before training: the fields
    that apply to it (a GloVe model has no `embed_dim` of its own), the model's first and
    the shared training options last."""
    values = {key: value for key, value in dataclasses.asdict(config).items()
              if field_applies(config, key)}
    order = sorted(values, key=lambda key: key in TRAINING_OPTIONS)
    width = max(map(len, values))
    return "\n".join(f"  {key:<{width}} = {values[key]}" for key in order)
