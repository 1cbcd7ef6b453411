"""Extending a language model's vocabulary with words of a new corpus, for fine-tuning.

A WordPiece vocabulary learned elsewhere splits the new corpus's own words (names,
jargon) into several pieces. `new_words` finds the frequent ones that split worst;
`extend` appends them to the vocabulary and the (tied) token embedding, each new row
initialised either from the word's pieces (their mean embedding) or from Word2Vec:
vectors trained with gensim on the new corpus, mapped into the model's embedding space
by a ridge regression fitted on the words both know.
"""

import re
from collections import Counter

import keras
import numpy as np

from data_prep.text import clean_html, make_wordpiece_tokenizer
from workflows.causal_lm.models import GPT

WORD = re.compile(r"\w+|[^\w\s]")  # WordPiece's own split: words and punctuation, case kept
INITIALISATIONS = ("word2vec", "pieces")
TOKEN_EMBEDDING = "embedding/token_embedding/embeddings"


def words_of(text):
    return WORD.findall(clean_html(text))


def new_words(documents, vocabulary, count, min_count=5):
    """[(word, its piece ids)] of the `count` words of `documents` seen at least
    `min_count` times that `vocabulary` splits into two or more pieces (or cannot
    spell at all: `[UNK]`, counted as one piece per character), the ones that would
    save the most tokens first."""
    counts = Counter(word for document in documents for word in words_of(document)
                     if word.isalpha() and len(word) > 1)
    known = set(vocabulary)
    candidates = [word for word, seen in counts.items() if seen >= min_count and word not in known]
    if not candidates:
        return []
    pieces = [np.asarray(ids).tolist() for ids in
              make_wordpiece_tokenizer(vocabulary)(candidates)]
    unknown = vocabulary.index("[UNK]") if "[UNK]" in vocabulary else None
    saved = {word: counts[word] * ((len(word) if ids == [unknown] else len(ids)) - 1)
             for word, ids in zip(candidates, pieces, strict=True)}
    ranked = sorted((w for w in candidates if saved[w] > 0), key=lambda w: (-saved[w], w))
    by_word = dict(zip(candidates, pieces, strict=True))
    return [(word, by_word[word]) for word in ranked[:count]]


def piece_rows(embeddings, words):
    """Each new word's row: the mean embedding of its pieces."""
    return np.stack([embeddings[ids].mean(axis=0) for _, ids in words])


def word2vec_rows(embeddings, vocabulary, words, documents, ridge=1.0, seed=1337):
    """Each new word's row from Word2Vec vectors trained on `documents`, mapped into the
    embedding space by ridge regression on the words that are whole tokens of
    `vocabulary`; a word Word2Vec did not keep gets the mean of its pieces."""
    from data_prep.word2vec import train_word2vec

    vectors = train_word2vec(documents, vector_size=100, min_count=2, epochs=10, seed=seed,
                             workers=1, tokenize=words_of)
    anchors = [(token, i) for i, token in enumerate(vocabulary)
               if token in vectors and not token.startswith("[")]
    source = np.stack([vectors[token] for token, _ in anchors])
    target = embeddings[[i for _, i in anchors]]
    mapping = np.linalg.solve(source.T @ source + ridge * np.eye(source.shape[1]),
                              source.T @ target)
    fallback = piece_rows(embeddings, words)
    rows = [vectors[word] @ mapping if word in vectors else fallback[k]
            for k, (word, _) in enumerate(words)]
    return np.stack(rows), len(anchors)


def extend(model, vocabulary, words, documents, initialisation="word2vec"):
    """(a GPT with `words` appended to its vocabulary and embedding, the vocabulary,
    a summary): every other weight is the source model's."""
    names = [weight.path for weight in model.weights]
    values = [keras.ops.convert_to_numpy(weight) for weight in model.weights]
    index = names.index(TOKEN_EMBEDDING)
    embeddings = values[index].astype("float32")
    summary = {"added_words": [word for word, _ in words], "initialisation": initialisation}
    if initialisation == "word2vec":
        rows, summary["anchor_words"] = word2vec_rows(embeddings, vocabulary, words, documents)
    else:
        rows = piece_rows(embeddings, words)
    values[index] = np.concatenate([embeddings, rows.astype("float32")])
    extended = GPT(len(embeddings) + len(words), model.max_length, model.embed_dim,
                   model.dense_dim, model.num_heads, model.num_layers, model.dropout,
                   dtype=model.sublayer_dtype)
    extended.set_weights(values)
    return extended, [*vocabulary, *(word for word, _ in words)], summary
