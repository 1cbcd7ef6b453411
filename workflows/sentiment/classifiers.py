"""Every kind of sentiment classifier, loaded from its folder (`classifier_folder.py`)
by the kind it names; and the Platt scaling fitted around a classifier's export."""

import json
from pathlib import Path

from workflows.sentiment.classifier_folder import SETTINGS_FILE


def load_classifier(folder):
    """The classifier saved in `folder`, by the `kind` its classifier.json names."""
    settings = json.loads((Path(folder) / SETTINGS_FILE).read_text())
    if settings.get("kind") == "end_to_end":
        from workflows.sentiment.end_to_end import EndToEndClassifier

        return EndToEndClassifier.load(folder)
    if settings.get("kind") == "paragraph_vectors":
        from workflows.sentiment.paragraph_classifier import ParagraphVectorClassifier

        return ParagraphVectorClassifier.load(folder)
    if settings.get("kind") == "encoder":
        from workflows.sentiment.encoder_classifier import EncoderClassifier

        return EncoderClassifier.load(folder)
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
