"""A keras-hub preset's WordPiece vocabulary grown with the user's words
(`--set extend_vocabulary=N`).

The N most frequent words of the training texts that the preset's tokenizer cuts into
`MIN_PIECES` or more pieces join its vocabulary, each then one token; the backbone's
token embedding grows by as many rows, each the mean of its word's pieces' vectors, so
a new token starts where its pieces pointed together. Every other weight is kept. The
grown tokenizer and backbone are saved with the model as any preset's are, and load
back with `keras.saving.load_model`.
"""

import collections
import re
import unicodedata

import numpy as np

MIN_PIECES = 3  # a word the preset cuts into fewer pieces is read well enough
WORD = re.compile(r"[^\W_]+")  # as WordPiece splits words: at spaces and punctuation
CANDIDATES_AT_ONCE = 2048  # words tokenized in one call while choosing


def split_words(tokenizer, texts, count):
    """The `count` most frequent words of `texts` (lowercased and without accents where
    the tokenizer reads them so) that `tokenizer` cuts into `MIN_PIECES` or more pieces,
    most frequent first (ties: first seen first)."""
    counts = collections.Counter()
    for text in texts:
        counts.update(WORD.findall(as_tokenizer_reads(tokenizer, text)))
    known, chosen = set(tokenizer.get_vocabulary()), []
    words = [word for word, _ in counts.most_common() if word not in known]
    for start in range(0, len(words), CANDIDATES_AT_ONCE):
        batch = words[start:start + CANDIDATES_AT_ONCE]
        for word, ids in zip(batch, tokenizer(batch), strict=True):
            if len(np.asarray(ids)) >= MIN_PIECES:
                chosen.append(word)
                if len(chosen) == count:
                    return chosen
    return chosen


def as_tokenizer_reads(tokenizer, text):
    if getattr(tokenizer, "lowercase", False):
        text = text.lower()
    if getattr(tokenizer, "strip_accents", False):
        text = "".join(char for char in unicodedata.normalize("NFD", text)
                       if unicodedata.category(char) != "Mn")
    return text


def grown_task(task, words):
    """`task` (a keras-hub `TextClassifier` with its preprocessor) rebuilt so that its
    tokenizer reads each of `words` as one token, with the backbone's token embedding
    grown by their rows (the mean of each word's old pieces' rows)."""
    import keras

    tokenizer = task.preprocessor.tokenizer
    pieces = [np.asarray(ids) for ids in tokenizer(words)]
    backbone = task.backbone
    config = backbone.get_config()
    size = config["vocabulary_size"]
    grown = type(backbone).from_config({**config, "vocabulary_size": size + len(words)})
    for new, old in zip(grown.weights, backbone.weights, strict=True):
        value = keras.ops.convert_to_numpy(old)
        if tuple(new.shape) != value.shape:  # a vocabulary axis: the embedding (or its reverse)
            axis = next(axis for axis, length in enumerate(value.shape) if length == size)
            rows = [np.take(value, ids, axis=axis).mean(axis=axis, keepdims=True)
                    for ids in pieces]
            value = np.concatenate([value, *rows], axis=axis)
        new.assign(value)
    tokenizer.set_vocabulary([*tokenizer.get_vocabulary(), *words])
    return type(task).from_config({**task.get_config(), "backbone": grown,
                                   "preprocessor": task.preprocessor})


def extended(task, texts, count):
    """`task` with `count` (at most) of the texts' words added (`split_words`), and the
    words; a tokenizer that is not WordPiece is refused in one line."""
    import keras_hub

    from data_prep.encoders import EncoderError

    tokenizer = task.preprocessor.tokenizer
    if not isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        raise EncoderError(
            f"extend_vocabulary grows a WordPiece vocabulary (BERT or DistilBERT presets); "
            f"this preset's tokenizer is a {type(tokenizer).__name__}: leave "
            "extend_vocabulary at 0.")
    words = split_words(tokenizer, texts, count)
    return (grown_task(task, words) if words else task), words
