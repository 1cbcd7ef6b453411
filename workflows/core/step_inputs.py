"""What a step reads from its command line beside the lesson's own flags: config
overrides (`--config FILE.yaml`, `--set KEY=VALUE`, `--sweep KEY=V1,V2`) and texts (as
arguments or the lines of `--file`), each mistake one `ConfigError` line."""

from pathlib import Path

from data_prep.text import text_lines
from workflows.core.config import ConfigError
from workflows.core.config_files import read_yaml_mapping


def check_texts(texts, what):
    """Refuses an empty list (a user error) or items that are not strings (a bug)."""
    if not texts:
        raise ConfigError(f"Give at least one {what}.")
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise TypeError(f"{what.capitalize()}s must be strings; items {bad[:10]} are not.")


def read_texts(texts, file, what):
    """The texts given as arguments plus the non-blank lines of `file` (UTF-8)."""
    texts = list(texts)
    if file:
        try:
            lines = text_lines(Path(file).read_text(encoding="utf-8"))
        except IsADirectoryError:
            raise ConfigError(f"--file {file} is a folder; give a text file, one per line.") \
                from None
        except FileNotFoundError:
            raise ConfigError(f"--file {file} does not exist.") from None
        except UnicodeDecodeError as error:
            raise ConfigError(f"--file {file} is not UTF-8 text ({error.reason} at byte "
                              f"{error.start}); save it as UTF-8.") from None
        except OSError as error:
            raise ConfigError(f"Cannot read --file {file}: {error.strerror}.") from None
        texts += [line for line in lines if line.strip()]
    if not texts:
        raise ConfigError(f"Give {what} as arguments or with --file.")
    return texts


def add_config_arguments(parser):
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="YAML mapping of config fields to override")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        dest="overrides", help="override one config field (repeatable; the "
                        "settings step lists every field of a --model, with its help), "
                        "e.g. --set epochs=3 --set dropout=0.3")
    parser.add_argument("--sweep", metavar="KEY=V1,V2", action="append", default=[],
                        help="train: one child run per value (repeatable: every combination), "
                        "grouped under a parent run (a grid), e.g. --sweep "
                        "learning_rate=1e-3,5e-4")


def overrides_from_args(args):
    """The `{field: value}` overrides given by `--config` then `--set` (which wins); a
    `tune:` block of the YAML file is the tune step's (`tune_block`)."""
    overrides = {}
    if getattr(args, "config", None):
        overrides.update(read_yaml_mapping(args.config))
        overrides.pop("tune", None)  # the tune step's own block
    for item in getattr(args, "overrides", []):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}.")
        overrides[key.strip().replace("-", "_")] = value.strip()
    return overrides


def accepted_values(item):
    """What a config field declared with `option()` accepts, in words."""
    rules = item.metadata
    if "choices" in rules:
        return "one of " + ", ".join(str(choice) for choice in rules["choices"])
    bounds = [f"{sign} {rules[key]}" for key, sign in (
        ("at_least", ">="), ("above", ">"), ("at_most", "<="), ("below", "<")) if key in rules]
    return ", ".join(bounds) or "any"
