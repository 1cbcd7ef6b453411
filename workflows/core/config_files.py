"""A config file (`--config FILE.yaml`): a mapping of config fields to values, in plain
YAML (no Python tags, no key given twice, at most `MAX_CONFIG_BYTES`), and its `tune:`
block, the tune step's own."""

from pathlib import Path

import yaml

from workflows.core.config import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a --config file larger than this is not a config


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the
    last one in silence: a typo'd copy would win)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        twice = sorted({str(key) for key in keys if keys.count(key) > 1})
        if twice:
            raise ConfigError(f"{', '.join(twice)} given twice (the mapping at line "
                              f"{node.start_mark.line + 1}): keep one.")
        return super().construct_mapping(node, deep)


def read_yaml_mapping(path):
    """The `field: value` mapping of a YAML file (plain YAML only: no Python tags, no
    key given twice)."""
    path = Path(path)
    if path.exists() and (not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES):
        raise ConfigError(f"--config {path} is not a YAML file of a config (a regular file "
                          f"under {MAX_CONFIG_BYTES >> 20} MiB).")
    try:
        loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except ConfigError as error:
        raise ConfigError(f"--config {path}: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"Cannot read --config {path}: {error}.") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--config {path} is not valid YAML: "
                          f"{' '.join(str(error).split())}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must hold a mapping of field: value.")
    return {str(key): value for key, value in loaded.items()}


def tune_block(path):
    """The `tune:` mapping of a `--config` file (empty when there is none)."""
    block = read_yaml_mapping(path).get("tune") if path else None
    if block is not None and not isinstance(block, dict):
        raise ConfigError(f"The tune: block of {path} must be a mapping (space:, trials:, "
                          "metric:, ...).")
    return block or {}
