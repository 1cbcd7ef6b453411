"""The folder every kind of sentiment classifier is saved as: the Keras model, the
settings (with the kind, by which `classifiers.load_classifier` reloads it) and, for
those that read words or pieces, the vocabulary."""

import json
from pathlib import Path

SETTINGS_FILE = "classifier.json"


def save_folder(folder, model, settings, vocabulary=None):
    """Writes `model.keras`, `classifier.json` and `vocabulary.txt` (if given)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder / "model.keras")
    if vocabulary is not None:
        (folder / "vocabulary.txt").write_text("\n".join(vocabulary), "utf-8")
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    return folder


def read_folder(folder, compile=False):
    """`(model, settings, vocabulary or None)` of a folder `save_folder` wrote."""
    import keras

    folder = Path(folder)
    model = keras.saving.load_model(folder / "model.keras", compile=compile)
    settings = json.loads((folder / SETTINGS_FILE).read_text())
    vocabulary = folder / "vocabulary.txt"
    return model, settings, vocabulary.read_text("utf-8").split("\n") \
        if vocabulary.exists() else None
