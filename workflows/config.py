"""Typed run configurations: dataclass defaults, overridden by a YAML file and `--set`.

Every workflow describes a model with a dataclass whose defaults reproduce the
tutorial. Users change fields with `--config run.yaml` and/or `--set key=value`
(repeatable); unknown keys and values of the wrong type are rejected with the list
of valid fields, so a typo never trains the wrong model silently.
"""

import dataclasses
import json
import types
import typing
from pathlib import Path


class ConfigError(ValueError):
    """A configuration override names an unknown field or has a bad value."""


def add_config_arguments(parser):
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="YAML mapping of config fields to override")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        dest="overrides", help="override one config field (repeatable), "
                        "e.g. --set epochs=3 --set dropout=0.3")
    parser.add_argument("--sweep", metavar="KEY=V1,V2", action="append", default=[],
                        help="train: one child run per value (repeatable: every combination), "
                        "grouped under a parent run, e.g. --sweep learning_rate=1e-3,5e-4")


def overrides_from_args(args):
    """The `{field: value}` overrides given by `--config` then `--set` (which wins)."""
    overrides = {}
    if getattr(args, "config", None):
        import yaml

        loaded = yaml.safe_load(Path(args.config).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{args.config} must hold a mapping of field: value.")
        overrides.update(loaded)
    for item in getattr(args, "overrides", []):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}.")
        overrides[key.strip().replace("-", "_")] = value.strip()
    return overrides


def apply_overrides(config, overrides):
    """A copy of dataclass `config` with `overrides` applied and type-checked."""
    fields = {field.name: field for field in dataclasses.fields(config)}
    hints = typing.get_type_hints(type(config))
    changes = {}
    for key, value in overrides.items():
        if key not in fields:
            raise ConfigError(f"Unknown config field {key!r} for {type(config).__name__}; "
                              f"valid fields: {', '.join(sorted(fields))}.")
        changes[key] = _coerce(key, value, hints[key])
    return dataclasses.replace(config, **changes)


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
        return base(value)
    except (TypeError, ValueError, json.JSONDecodeError) as error:
        raise ConfigError(f"{key} must be {base.__name__}, got {value!r} ({error}).") from None


def _to_number(value, kind):
    number = json.loads(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ValueError("not a number")
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
    """The config as aligned `field = value` lines, to print before training."""
    values = dataclasses.asdict(config)
    width = max(map(len, values))
    return "\n".join(f"  {key:<{width}} = {value}" for key, value in values.items())


def parse_sweep(items):
    """`["lr=1e-3,5e-4", "units=16,32"]` -> every combination as `{field: "value"}`."""
    import itertools

    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        choices = [value.strip() for value in values.split(",") if value.strip()]
        if not sep or not key.strip() or not choices:
            raise ConfigError(f"--sweep expects KEY=V1,V2,..., got {item!r}.")
        axes.append([(key.strip().replace("-", "_"), value) for value in choices])
    return [dict(combination) for combination in itertools.product(*axes)]
