"""Every kind of sentiment classifier folder, loaded by the kind it records."""

import json
from pathlib import Path


def load_classifier(folder):
    """The classifier saved in `folder`, by the `kind` its classifier.json names."""
    settings = json.loads((Path(folder) / "classifier.json").read_text())
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
