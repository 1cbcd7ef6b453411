import importlib
from dataclasses import dataclass

import pytest

from workflows.core import config, config_files, step_inputs


@dataclass(frozen=True)
class Example:
    epochs: int = 10
    rate: float = 0.1
    name: str = "bilstm"
    frozen: bool = True
    path: str | None = None


def test_overrides_are_coerced_from_strings():
    changed = config.apply_overrides(
        Example(), {"epochs": "3", "rate": "1e-3", "frozen": "false", "path": "a.txt"})
    assert changed == Example(epochs=3, rate=0.001, frozen=False, path="a.txt")
    assert config.apply_overrides(changed, {"path": "none"}).path is None
    assert config.apply_overrides(Example(), {"epochs": 4.0}).epochs == 4  # from YAML


@pytest.mark.parametrize("overrides, message", [
    ({"epoch": "3"}, "Unknown config field 'epoch'.*valid fields: epochs, frozen"),
    ({"epochs": "3.5"}, "epochs must be int"),
    ({"epochs": "ten"}, "epochs must be int"),
    ({"frozen": "maybe"}, "frozen must be bool"),
    ({"epochs": None}, "epochs cannot be empty"),
    ({"rate": "inf"}, r"rate must be float, got 'inf' \(not a finite number\)"),
    ({"rate": "-Infinity"}, "not a finite number"),
    ({"rate": float("nan")}, "not a finite number"),
])
def test_bad_overrides_name_the_problem(overrides, message):
    with pytest.raises(config.ConfigError, match=message):
        config.apply_overrides(Example(), overrides)


def test_yaml_file_then_set_flags(tmp_path):
    import argparse

    (tmp_path / "run.yaml").write_text("epochs: 5\nrate: 0.5\n")
    parser = argparse.ArgumentParser()
    step_inputs.add_config_arguments(parser)
    args = parser.parse_args(["--config", str(tmp_path / "run.yaml"), "--set", "epochs=7"])
    assert step_inputs.overrides_from_args(args) == {"epochs": "7", "rate": 0.5}
    with pytest.raises(config.ConfigError, match="KEY=VALUE"):
        step_inputs.overrides_from_args(parser.parse_args(["--set", "epochs"]))
    assert "epochs = 10" in config.describe(Example())


@pytest.mark.parametrize("content, message", [
    ("epochs: 5\nrate: 0.5\nepochs: 6\n", "epochs given twice"),
    ("tune:\n  trials: 3\n  trials: 4\n", "trials given twice"),
])
def test_a_yaml_key_given_twice_is_refused(tmp_path, content, message):
    (tmp_path / "run.yaml").write_text(content)
    with pytest.raises(config.ConfigError, match=message):
        config_files.read_yaml_mapping(tmp_path / "run.yaml")


def test_a_config_that_is_no_regular_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (config_files.MAX_CONFIG_BYTES + 10))
    for path in (big, tmp_path, "/dev/zero"):
        with pytest.raises(config.ConfigError, match="is not a YAML file of a config"):
            config_files.read_yaml_mapping(path)


def test_every_setting_of_every_lesson_declares_its_help():
    """What `--set` takes is said where it is declared (`option(..., help=...)`), every
    field of every model, on/off ones and paths too."""
    import dataclasses

    from workflows.core.lesson import lesson_names, load_lesson

    missing = set()
    for name in lesson_names():
        catalog = load_lesson(name).catalog
        for model in catalog.models:
            for preset in catalog.presets[model]:
                for field in dataclasses.fields(catalog.base(model, preset)):
                    if not field.metadata.get("help"):
                        missing.add(f"{name}: {type(catalog.base(model, preset)).__name__}."
                                    f"{field.name}")
    assert not missing, sorted(missing)


def test_the_settings_step_lists_what_applies_with_its_help(capsys):
    from workflows import imdb_sentiment

    assert imdb_sentiment.main(["settings", "--model", "bilstm", "--set", "units=7"]) == 0
    out = capsys.readouterr().out
    assert "  units = 7  [>= 1]\n      units of each cell (each direction)" in out
    assert "  epochs = " in out.split("this model's own")[0]  # the shared ones first
    assert "glove_dim" not in out  # (applies to GloVe embeddings only)
    with pytest.raises(SystemExit):  # and train --help says where they are
        imdb_sentiment.main(["train", "--help"])
    assert "settings step lists every field" in " ".join(capsys.readouterr().out.split())


def test_a_field_with_a_flag_of_its_own_shows_the_help_its_option_declares():
    """One source of help: `--direction`'s text is `direction`'s `option(help=...)`."""
    from workflows.core.lesson import lesson_names, load_lesson

    for name in lesson_names():
        module = importlib.import_module(load_lesson(name).__module__)
        for field, text in module.CLI.shortcuts.items():
            assert text, (name, field)
    from workflows import translation

    assert translation.CLI.shortcuts["batch_tokens"].startswith(
        "with bucketing, the token budget of a batch")


@pytest.mark.parametrize("argv", [
    ["train", "--model", "bow", "--set", "model=nonsense"],  # a KeyError at 13fd371
    ["train", "--model", "bow", "--set", "model=gru"],  # an AttributeError at 13fd371
    ["run", "--model", "bow", "--model", "nbsvm", "--set", "model=gru"],
])
def test_the_model_is_chosen_by_its_flag_and_never_by_an_override(argv, capsys):
    from workflows import imdb_sentiment

    assert imdb_sentiment.main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "choose the model with --model" in error
