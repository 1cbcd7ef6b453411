"""Every kind of sentiment classifier folder: the Keras model, the settings (with the
kind, by which `load_classifier` reloads it) and, for those that read words or
pieces, the vocabulary."""

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


def load_classifier(folder):
    """The classifier saved in `folder`, by the `kind` its classifier.json names."""
    settings = json.loads((Path(folder) / SETTINGS_FILE).read_text())
    if settings.get("kind") == "end_to_end":
        from workflows.sentiment.end_to_end import EndToEndClassifier

        return EndToEndClassifier.load(folder)
    if settings.get("kind") == "paragraph_vectors":
        from workflows.sentiment.paragraph_classifier import ParagraphVectorClassifier

        return ParagraphVectorClassifier.load(folder)
    if settings.get("kind") == "token_ids":
        from workflows.sentiment.token_classifier import TokenClassifier

        return TokenClassifier.load(folder)
    from workflows.sentiment.subword_classifier import SubwordClassifier

    return SubwordClassifier.load(folder)


def calibrating(save, texts, labels):
    """`save(folder)`, then the classifier it saved gets its Platt scaling, fitted on
    (`texts`, `labels`): the validation reviews, never test."""
    from workflows.sentiment.calibration import Calibration

    def save_calibrated(folder):
        save(folder)
        fitted = Calibration.fit(labels, load_classifier(folder).predict(texts))
        fitted.save(folder)
        print(f"Calibration on the validation reviews: p -> sigmoid({fitted.slope:.3f} "
              f"logit(p) + {fitted.intercept:.3f})")

    return save_calibrated
