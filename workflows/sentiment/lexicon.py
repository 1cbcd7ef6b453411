"""A general-purpose sentiment lexicon as a column of an ensemble.

VADER (Hutto & Gilbert, 2014; the `vaderSentiment` package, MIT licence) scores a text
from about 7,500 words and emoticons whose valence people rated, with rules for
negation ("not good"), intensifiers ("very"), contrast ("but") and emphasis ("!!!",
CAPITALS). It was written for short text of any domain, so it knows what IMDB's train
reviews rarely say ("delicious", "rude", "refund"), where a model trained on films
stays near 0.5. Its compound score `c` in [-1, 1] enters the ensemble's stacking as the
log-odds `log((1 + c) / (1 - c))`, weighted like any member's. Plain Python: it ships
with the ensemble's pyfunc.
"""

import numpy as np

from .calibration import EPSILON

LEXICON_PACKAGES = {"vader": "vadersentiment"}  # what a logged ensemble must install


def lexicon_probabilities(name, texts):
    """`(1 + c) / 2` of the lexicon's compound score `c` of each text."""
    if name != "vader":
        raise ValueError(f"unknown lexicon {name!r} (one of {', '.join(LEXICON_PACKAGES)})")
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    analyzer = SentimentIntensityAnalyzer()
    compound = np.array([analyzer.polarity_scores(text)["compound"] for text in texts],
                        "float64")
    return np.clip((1 + compound) / 2, EPSILON, 1 - EPSILON)
