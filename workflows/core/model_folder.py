"""The folder every trained model of the kit is saved as: `model.keras` (the Keras model),
`settings.json` (its kind and what it needs to run: lengths, cuts, beam width) and its
vocabularies, one `<name>.txt` each, one entry a line.

A classifier, a translator and a generator are each saved this way; a folder without
the kind asked for (another version's, or another kind's) gets one line saying to train
the model again.
"""

import json
from pathlib import Path

from process.errors import UserError

SETTINGS_FILE = "settings.json"
MODEL_FILE = "model.keras"


class ModelFolderError(UserError):
    """A model folder this version cannot read."""


def save_folder(folder, model, kind, settings=None, vocabularies=None):
    """Writes `model` and its `settings` as a model of `kind`, with `vocabularies`
    (name -> list of entries); returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder / MODEL_FILE)
    for name, entries in (vocabularies or {}).items():
        (folder / f"{name}.txt").write_text("\n".join(entries), "utf-8")
    record = {"kind": kind, "vocabularies": sorted(vocabularies or {}), **(settings or {})}
    (folder / SETTINGS_FILE).write_text(json.dumps(record, indent=1))
    return folder


def read_settings(folder, kinds=None):
    """The settings of the model folder `folder`; refuses, in one line, a folder whose
    kind is not one of `kinds` (any kind if None)."""
    try:
        settings = json.loads((Path(folder) / SETTINGS_FILE).read_text())
        kind = settings["kind"]
    except (OSError, ValueError, TypeError, KeyError):
        settings, kind = None, None
    if kind is None or (kinds is not None and kind not in kinds):
        wanted = " or ".join(kinds) if kinds else "model"
        raise ModelFolderError(f"{folder} is not a {wanted} folder of this version (no "
                               f"such kind in its {SETTINGS_FILE}): train the model again.")
    return settings


def read_folder(folder, kinds=None, compile=False):
    """`(model, settings, vocabularies)` of a folder `save_folder` wrote."""
    import keras

    folder = Path(folder)
    settings = read_settings(folder, kinds)
    vocabularies = {name: (folder / f"{name}.txt").read_text("utf-8").split("\n")
                    for name in settings["vocabularies"]}
    model = keras.saving.load_model(folder / MODEL_FILE, compile=compile)
    return model, settings, vocabularies
