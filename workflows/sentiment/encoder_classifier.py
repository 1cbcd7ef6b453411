"""A classifier on a pretrained text encoder (BERT architecture, `data_prep.encoders`).

Reviews are read as the encoder's WordPiece tokens (`[CLS] ... [SEP]`, at most
`max_review_tokens`; plain Python, no TensorFlow needed): a longer review is cut to its
start (`head`) or to its start and its end (`head+tail`), where a review's verdict
usually is. The mean of the encoder's outputs over a review's tokens goes through dropout
to P(positive). `EncoderClassifier.save(folder)` writes the Keras model, the vocabulary
and the settings; `EncoderClassifier.load(folder).predict(texts)` scores raw reviews in
batches of similar length, padded to a few fixed lengths.
"""

from functools import cached_property

import keras

from data_prep.buckets import boundaries_up_to
from data_prep.text import clean_html
from data_prep.wordpiece import WordPiece
from workflows.core.compilation import compiled
from workflows.sentiment.classifier_folder import read_folder, save_folder
from workflows.sentiment.length_batches import score_rows

KIND = "encoder"
LENGTHS = (32, 64, 128, 192, 256, 384, 512)  # padded lengths of batches: few shapes


def encoder_classifier(backbone, dropout):
    """Token ids (0: padding) -> the backbone -> masked mean -> Dropout -> sigmoid."""
    backbone.get_layer("pooled_dense").trainable = False  # [CLS]'s pooler: unused
    ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    mask = keras.ops.not_equal(ids, 0)
    outputs = backbone({"token_ids": ids, "segment_ids": keras.ops.zeros_like(ids),
                        "padding_mask": mask})["sequence_output"]
    pooled = keras.layers.GlobalAveragePooling1D(name="mean_of_tokens")(outputs, mask=mask)
    pooled = keras.layers.Dropout(dropout)(pooled)
    probability = keras.layers.Dense(1, activation="sigmoid", dtype="float32",
                                     name="positive")(pooled)
    return keras.Model(ids, probability, name="encoder_classifier")


def token_rows(tokenizer, texts, max_tokens, read="head"):
    """`[CLS]`, each text's token ids (`data_prep.wordpiece`) cut to fit, `[SEP]`: a text
    too long keeps its first tokens (`head`), or its first quarter and last three
    quarters of the room (`head+tail`, the best cut for IMDB in Sun et al. 2019)."""
    first, last = tokenizer.ids["[CLS]"], tokenizer.ids["[SEP]"]
    room = max_tokens - 2
    head = room if read == "head" else room // 4
    rows = []
    for text in texts:
        ids = tokenizer.encode(clean_html(text))
        kept = ids if len(ids) <= room else ids[:head] + ids[len(ids) - (room - head):]
        rows.append([first, *kept, last])
    return rows


def padded_length(length, max_tokens):
    """The first of the few padded lengths up to `max_tokens` that holds `length`."""
    return next(width for width in boundaries_up_to(max_tokens, LENGTHS) if width >= length)


class EncoderClassifier:
    def __init__(self, model, vocabulary, max_review_tokens, lowercase=True, read="head"):
        self.model, self.vocabulary = model, list(vocabulary)
        self.max_review_tokens, self.lowercase = max_review_tokens, lowercase
        self.read = read
        self._forward = compiled(lambda ids: self.model(ids, training=False), model,
                                 tf_signature=[((None, None), "int32")])  # one graph

    @cached_property
    def tokenizer(self):
        return WordPiece(self.vocabulary, self.lowercase)

    def token_rows(self, texts):
        return token_rows(self.tokenizer, texts, self.max_review_tokens, self.read)

    def predict(self, texts, batch_size=32):
        """P(positive) of each text."""
        return score_rows(self._forward, self.token_rows(texts), batch_size,
                          lambda length: padded_length(length, self.max_review_tokens))

    def save(self, folder):
        return save_folder(folder, self.model, {
            "kind": KIND, "max_review_tokens": self.max_review_tokens,
            "lowercase": self.lowercase, "read": self.read}, self.vocabulary)

    @classmethod
    def load(cls, folder):
        import keras_hub  # noqa: F401  registers BertBackbone for the saved model

        model, settings, vocabulary = read_folder(folder)
        return cls(model, vocabulary, settings["max_review_tokens"], settings["lowercase"],
                   settings.get("read", "head"))  # folders saved before `read`: head
