"""A classifier that reads reviews as a language model's WordPiece tokens.

`SubwordClassifier.save(folder)` writes the Keras model (token ids in, P(positive)
out), the vocabulary and the settings; `SubwordClassifier.load(folder).predict(texts)`
tokenizes raw reviews the way the language model read its corpus (each document
starts after `[END]`) and scores them in batches of similar length.
"""

from functools import cached_property

import numpy as np

import layers  # noqa: F401  registers the layers a saved model uses
from data_prep.subwords import SPECIAL_TOKENS, make_wordpiece_tokenizer
from data_prep.text import clean_html
from workflows.causal_lm import models  # noqa: F401  registers GPT and GPTClassifier
from workflows.core.compilation import compiled
from workflows.sentiment.classifier_folder import read_folder, save_folder
from workflows.sentiment.length_batches import score_rows

END_ID = SPECIAL_TOKENS.index("[END]")


def token_rows(tokenizer, texts, max_tokens, batch_size=512):
    """`[END]` then each review's token ids, cut at `max_tokens`."""
    rows = []
    for start in range(0, len(texts), batch_size):
        batch = [clean_html(text) for text in texts[start:start + batch_size]]
        rows += [[END_ID, *np.asarray(ids).tolist()][:max_tokens] for ids in tokenizer(batch)]
    return rows


class SubwordClassifier:
    def __init__(self, model, vocabulary, max_review_tokens):
        self.model, self.vocabulary = model, list(vocabulary)
        self.max_review_tokens = max_review_tokens
        self._forward = compiled(lambda ids: self.model(ids, training=False), model,
                                 tf_signature=[((None, None), "int32")])  # one graph

    @cached_property
    def tokenizer(self):
        return make_wordpiece_tokenizer(self.vocabulary)

    def token_rows(self, texts):
        return token_rows(self.tokenizer, texts, self.max_review_tokens)

    def predict(self, texts, batch_size=32):
        """P(positive) of each text; batches of similar length, padded to a multiple of
        the model's chunk length (few shapes to compile)."""
        chunk = self.model.backbone.max_length
        return score_rows(self._forward, self.token_rows(list(texts)), batch_size,
                          lambda length: -(-length // chunk) * chunk)

    def save(self, folder):
        return save_folder(folder, self.model, {"max_review_tokens": self.max_review_tokens},
                           self.vocabulary)

    @classmethod
    def load(cls, folder):
        model, settings, vocabulary = read_folder(folder)
        return cls(model, vocabulary, settings["max_review_tokens"])
