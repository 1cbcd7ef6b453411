"""How raw texts become each family's network inputs: the preprocessor layers of the
`TextClassifier`s (`text_classifier.py`), one batch of strings at a time, padded to a
few fixed widths.

- `ReviewTokens` (the RNNs, the Transformer): the prepared token ids, in plain Python;
- `NgramFeatures` (`bow`, `nbsvm`): TensorFlow's adapted `TextVectorization`;
- `WordPieceRows` (`encoder`): the encoder's WordPiece tokens between `[CLS]` and `[SEP]`;
- `HubFeatures` (`encoder` on a keras-hub preset): the preset's own preprocessor;
- `SubwordRows` (`lm_classifier`): the language model's WordPiece tokens after `[END]`;
- `ParagraphVectorInputs` (`doc2vec`): the vectors its Doc2Vec model infers.

Each family's libraries (TensorFlow, Hugging Face `tokenizers`, keras-hub, gensim) load
inside its own preprocessor, so a classifier of one family loads none of the others'.
"""

from pathlib import Path

import keras
import numpy as np

from data_prep.imdb import ReviewVectorizer
from data_prep.text import SPECIAL_TOKENS, boundaries_up_to, clean_html, pad_rows
from workflows.sentiment.text_classifier import PACKAGE, TextPreprocessor

LENGTHS = (32, 64, 128, 192, 256, 384, 512)  # padded lengths of WordPiece batches
DOC2VEC_FILE = "doc2vec"  # the Doc2Vec model, among the classifier's assets


@keras.saving.register_keras_serializable(package=PACKAGE)
class ReviewTokens(TextPreprocessor):
    """Texts -> `(texts, sequence_length)` token ids of the prepared vocabulary
    (`data_prep.imdb.ReviewVectorizer`): one shape."""

    def __init__(self, vocabulary=None, sequence_length=600, standardize="review", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length, self.standardize = sequence_length, standardize
        self.vectorizer = None if vocabulary is None else \
            ReviewVectorizer(vocabulary, sequence_length, standardize)

    def encode(self, texts):
        return self.vectorizer(texts)

    def assets(self):
        return {"vocabulary": self.vectorizer.vocabulary}

    def restore(self, assets):
        self.vectorizer = ReviewVectorizer(assets["vocabulary"], self.sequence_length,
                                           self.standardize)

    def get_config(self):
        return {**super().get_config(), "sequence_length": self.sequence_length,
                "standardize": self.standardize}


@keras.saving.register_keras_serializable(package=PACKAGE)
class NgramFeatures(TextPreprocessor):
    """Texts -> the `standardize` function of `data_prep.text` (by name; None: the
    vectorizer's own, as classifiers saved before it did) then the n-gram features of the
    adapted `TextVectorization` (its vocabulary saved with it, as Keras saves the
    layer): one shape, the vocabulary's size."""

    def __init__(self, vectorizer, standardize=None, **kwargs):
        super().__init__(**kwargs)
        self.vectorizer, self.standardize = vectorizer, standardize

    def features(self, texts):
        """The features of a batch of texts (a `tf.string` tensor: in `tf.data` too)."""
        from data_prep.text import STANDARDIZATIONS

        if self.standardize:
            texts = {function.__name__: function
                     for function in STANDARDIZATIONS}[self.standardize](texts)
        return self.vectorizer(texts)

    def encode(self, texts):
        import tensorflow as tf  # the vectorizer is a TensorFlow layer

        features = self.features(tf.constant(texts, tf.string))
        if keras.backend.backend() == "tensorflow":
            return features
        return tf.sparse.to_dense(features).numpy() if isinstance(features, tf.SparseTensor) \
            else np.asarray(features)

    def get_config(self):
        return {**super().get_config(), "standardize": self.standardize,
                "vectorizer": keras.saving.serialize_keras_object(self.vectorizer)}

    @classmethod
    def from_config(cls, config):
        from data_prep.text import register_standardizations

        register_standardizations()  # an earlier vectorizer's standardization, by name
        config = dict(config)
        return cls(keras.saving.deserialize_keras_object(config.pop("vectorizer")), **config)


def wordpiece_rows(tokenizer, texts, max_tokens, read="head"):
    """`[CLS]`, each text's token ids (`data_prep.text.WordPiece`) cut to fit, `[SEP]`:
    a text too long keeps its first tokens (`head`), or its first quarter and last three
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


@keras.saving.register_keras_serializable(package=PACKAGE)
class WordPieceRows(TextPreprocessor):
    """Texts -> `wordpiece_rows` of the encoder's vocabulary, padded to the first of the
    few `padded_length`s that holds a batch's longest."""

    def __init__(self, vocabulary=None, max_tokens=128, lowercase=True, read="head", **kwargs):
        super().__init__(**kwargs)
        self.max_tokens, self.lowercase, self.read = max_tokens, lowercase, read
        self.restore({"vocabulary": vocabulary} if vocabulary is not None else {})

    def encode(self, texts):
        rows = wordpiece_rows(self.tokenizer, texts, self.max_tokens, self.read)
        return pad_rows(rows, padded_length(max(map(len, rows)), self.max_tokens))

    def assets(self):
        return {"vocabulary": self.vocabulary}

    def restore(self, assets):
        from data_prep.text import WordPiece  # Hugging Face tokenizers

        self.vocabulary = assets.get("vocabulary")
        self.tokenizer = WordPiece(self.vocabulary, self.lowercase) if self.vocabulary else None

    def get_config(self):
        return {**super().get_config(), "max_tokens": self.max_tokens,
                "lowercase": self.lowercase, "read": self.read}


def hub_features(preprocessor, texts, batch_size=256):
    """A keras-hub preprocessor's arrays (`token_ids`, `padding_mask`, ...) of every
    text, HTML tags and entities cleaned first."""
    chunks = []
    for start in range(0, len(texts), batch_size):
        batch = [clean_html(text) for text in texts[start:start + batch_size]]
        chunks.append({name: keras.ops.convert_to_numpy(value)
                       for name, value in preprocessor(batch).items()})
    return {name: np.concatenate([chunk[name] for chunk in chunks]) for name in chunks[0]}


@keras.saving.register_keras_serializable(package=PACKAGE)
class HubFeatures(TextPreprocessor):
    """Texts -> the arrays of a preset's own preprocessor (a keras-hub layer, saved with
    its tokenizer's assets as Keras saves it), cut or padded to one length."""

    def __init__(self, preprocessor, **kwargs):
        super().__init__(**kwargs)
        self.preprocessor = preprocessor

    def encode(self, texts):
        return hub_features(self.preprocessor, texts)

    def get_config(self):
        return {**super().get_config(),
                "preprocessor": keras.saving.serialize_keras_object(self.preprocessor)}

    @classmethod
    def from_config(cls, config):
        import keras_hub  # noqa: F401  registers the preprocessors and tokenizers

        config = dict(config)
        return cls(keras.saving.deserialize_keras_object(config.pop("preprocessor")), **config)


def subword_rows(tokenizer, texts, max_tokens, batch_size=512):
    """`[END]` then each text's token ids, cut at `max_tokens`."""
    end_id = SPECIAL_TOKENS.index("[END]")
    rows = []
    for start in range(0, len(texts), batch_size):
        batch = [clean_html(text) for text in texts[start:start + batch_size]]
        rows += [[end_id, *np.asarray(ids).tolist()][:max_tokens] for ids in tokenizer(batch)]
    return rows


@keras.saving.register_keras_serializable(package=PACKAGE)
class SubwordRows(TextPreprocessor):
    """Texts -> `subword_rows` of a language model's WordPiece vocabulary (each text
    starts after `[END]`, as the model read its corpus), padded to a multiple of the
    model's chunk length: few shapes to compile."""

    def __init__(self, vocabulary=None, max_tokens=512, chunk=128, **kwargs):
        super().__init__(**kwargs)
        self.max_tokens, self.chunk = max_tokens, chunk
        self.restore({"vocabulary": vocabulary} if vocabulary is not None else {})

    def encode(self, texts):
        rows = subword_rows(self.tokenizer, texts, self.max_tokens)
        return pad_rows(rows, -(-max(map(len, rows)) // self.chunk) * self.chunk)

    def assets(self):
        return {"vocabulary": self.vocabulary}

    def restore(self, assets):
        from data_prep.text import make_wordpiece_tokenizer  # keras-hub's

        self.vocabulary = assets.get("vocabulary")
        self.tokenizer = make_wordpiece_tokenizer(self.vocabulary) if self.vocabulary else None

    def get_config(self):
        return {**super().get_config(), "max_tokens": self.max_tokens, "chunk": self.chunk}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ParagraphVectorInputs(TextPreprocessor):
    """Texts -> their paragraph vectors, inferred by the Doc2Vec model (saved with the
    classifier, without its training texts' own vectors): one shape."""

    def __init__(self, vectors=None, **kwargs):
        super().__init__(**kwargs)
        self.vectors = vectors

    def encode(self, texts):
        return self.vectors.infer(list(texts))

    def save_assets(self, dir_path):
        self.vectors.for_inference().save(Path(dir_path) / DOC2VEC_FILE)

    def load_assets(self, dir_path):
        from data_prep.paragraph_vectors import ParagraphVectors  # gensim

        self.vectors = ParagraphVectors.load(Path(dir_path) / DOC2VEC_FILE)
