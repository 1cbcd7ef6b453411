"""BM25 (Robertson and Zaragoza, 2009): the lexical retriever, through bm25s.

bm25s (Lù, 2024) reproduces Lucene's scores (`method="lucene"`) with sparse NumPy
matrices: `tokenize` -> `BM25().index` -> `retrieve`. A term's weight in a document is
`idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / mean length))`: `k1` says how
fast repeated terms saturate, `b` how much long documents are discounted. Text is
lowercased, split into words (of any script), stop words dropped and words stemmed
(Snowball, in the catalogue's language) the same way for documents and queries.
"""

import logging
from pathlib import Path

import bm25s
import numpy as np

# bm25s says at INFO, once per query, that a query of stop words only scores 0 everywhere
# (Beam's workers log INFO): hundreds of lines for 600,000 labelled queries, nothing to
# act on
logging.getLogger("bm25s").setLevel(logging.WARNING)

class BM25Index:
    """A bm25s index over `texts` (row i is document i), with its tokenizer settings."""

    def __init__(self, retriever, stemmer, stop_words):
        self.retriever, self.stemmer, self.stop_words = retriever, stemmer, stop_words

    @classmethod
    def build(cls, texts, k1=1.2, b=0.75, stemmer="english", stop_words="en"):
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        retriever.index(_tokenize(texts, stemmer, stop_words), show_progress=False)
        return cls(retriever, stemmer, stop_words)

    def search(self, queries, k):
        """`(rows, scores)`, each `(len(queries), k)`: the best `k` documents of each
        query, best first (rows of documents that share no term score 0)."""
        k = min(k, self.retriever.scores["num_docs"])
        tokens = _tokenize(queries, self.stemmer, self.stop_words)
        rows, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return rows.astype("int64"), scores.astype("float32")

    def scores_of(self, queries, rows):
        """Per query, the BM25 scores of its document rows (any number per query)."""
        tokens = _tokenize(queries, self.stemmer, self.stop_words, ids=False)
        return [self.retriever.get_scores(query)[np.asarray(row, "int64")].astype("float32")
                for query, row in zip(tokens, rows, strict=True)]

    def save(self, folder):
        folder = Path(folder)
        self.retriever.save(str(folder))
        (folder / "tokenizer.txt").write_text(f"{self.stemmer}\n{self.stop_words}\n")

    @classmethod
    def load(cls, folder):
        stemmer, stop_words = Path(folder, "tokenizer.txt").read_text().split()
        return cls(bm25s.BM25.load(str(folder)), stemmer, stop_words)


def _tokenize(texts, stemmer, stop_words, ids=True):
    import Stemmer

    return bm25s.tokenize(
        list(texts), stopwords=None if stop_words == "none" else stop_words,
        stemmer=None if stemmer == "none" else Stemmer.Stemmer(stemmer),
        return_ids=ids, show_progress=False)
