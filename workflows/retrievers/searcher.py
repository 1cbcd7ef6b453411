"""A retriever ready to answer queries, and its saved folder (the one format every
retriever of the retrieval lesson is exported, logged, served and loaded in).

    retriever/
      retriever.json   which retriever, and its search settings
      documents.jsonl  the id and title of each document, in index order
      bm25/            the BM25 index (bm25s), when the retriever reads it
      encoder/         the dual encoder (a keras-hub preset and its vocab.txt), when used
      embeddings.npy   the documents' embeddings (or their windows'), when used
      owners.npy       the document row of each window, with `passage_sentences`
      index.faiss      their (or their windows') HNSW graph, above `exact_limit` documents
"""

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_prep.text import text_lines
from workflows.retrievers import fusion
from workflows.retrievers.bm25 import BM25Index
from workflows.retrievers.dense import DenseEncoder
from workflows.retrievers.index import ApproximateIndex, PassageIndex, index_for

SETTINGS_FILE = "retriever.json"
GRAPH_FILE = "index.faiss"  # the HNSW graph of a corpus above `exact_limit`
OWNERS_FILE = "owners.npy"  # with passages: the document of each embedded window
LEXICAL = ("bm25", "rerank", "intersection", "hybrid")
DENSE = ("dense", "rerank", "intersection", "hybrid")


@dataclass(frozen=True)
class SearchSettings:
    """How a retriever ranks; the lesson's config fields of the same names."""

    retriever: str
    depth: int = 100  # candidates each list contributes to rerank, intersection, hybrid
    hybrid_weight: float = 0.5  # of the dense score in the convex combination
    fusion: str = "convex"  # hybrid: "convex", "rescored" or "rrf"
    rrf_k: int = 60
    query_length: int = 64
    encode_batch_size: int = 32
    exact_limit: int = 100_000  # documents searched exactly; above, an HNSW graph


class Searcher:
    """Ranks documents for query strings: `search(queries, k)` -> per query a list of
    `(row, score)`, best first."""

    def __init__(self, settings, doc_ids, titles, bm25=None, encoder=None, embeddings=None,
                 index=None):
        self.settings, self.doc_ids, self.titles = settings, list(doc_ids), list(titles)
        self.bm25, self.encoder = bm25, encoder
        if index is None and embeddings is not None:
            index = index_for(embeddings, settings.exact_limit)
        self.index = index

    def encode_queries(self, queries):
        return self.encoder.encode(queries, self.settings.query_length,
                                   self.settings.encode_batch_size)

    def search(self, queries, k=10):
        """Per query, its top `k` as `(row, score)`, best first; the fused retrievers
        read `depth` candidates of each list (at least `k`)."""
        kind, depth = self.settings.retriever, max(self.settings.depth, k)
        if kind == "bm25":
            return [_matching(ranked) for ranked in _pairs(*self.bm25.search(queries, k))]
        vectors = self.encode_queries(queries)
        if kind == "dense":
            return _pairs(*self.index.search(vectors, k))
        bm25_rows, bm25_scores = self.bm25.search(queries, depth)
        bm25_rows = [rows[scores > 0] for rows, scores in zip(bm25_rows, bm25_scores,
                                                                strict=True)]
        bm25_scores = [scores[scores > 0] for scores in bm25_scores]
        if kind == "rerank":
            return [fusion.rerank(rows, self.index.scores_of(vector[None], rows[None])[0],
                                  depth)[:k]
                    for rows, vector in zip(bm25_rows, vectors, strict=True)]
        dense_rows, dense_scores = self.index.search(vectors, depth)
        if kind == "intersection":
            return [fusion.intersection(b, d, s, depth)[:k]
                    for b, d, s in zip(bm25_rows, dense_rows, dense_scores, strict=True)]
        if self.settings.fusion == "rrf":
            return [fusion.reciprocal_rank_fusion([b, d], self.settings.rrf_k)[:k]
                    for b, d in zip(bm25_rows, dense_rows, strict=True)]
        if self.settings.fusion == "rescored":  # each candidate scored by both retrievers
            bm25_rows = dense_rows = [np.union1d(b, d) for b, d in zip(bm25_rows, dense_rows,
                                                                      strict=True)]
            bm25_scores = self.bm25.scores_of(queries, bm25_rows)
            dense_scores = self.index.scores_of(vectors, dense_rows)
        return [fusion.hybrid(b, bs, d, ds, self.settings.hybrid_weight)[:k]
                for b, bs, d, ds in zip(bm25_rows, bm25_scores, dense_rows, dense_scores,
                                        strict=True)]

    def rankings(self, query_ids, queries, k=100):
        """`({query id: [document ids]}, seconds)`: what the metrics read; the seconds
        of a warm searcher (the encoder compiled for every query length first)."""
        if self.encoder is not None:
            self.encoder.warm_up(self.settings.query_length, self.settings.encode_batch_size)
        started = time.perf_counter()
        results = self.search(queries, k)
        seconds = time.perf_counter() - started
        return ({query: [self.doc_ids[row] for row, _ in ranked[:k]]
                 for query, ranked in zip(query_ids, results, strict=True)}, seconds)

    def answers(self, queries, k=10):
        """Per query, its top `k` as `{"rank", "id", "title", "score"}` records."""
        return [[{"rank": rank, "id": self.doc_ids[row], "title": self.titles[row],
                  "score": round(float(score), 6)}
                 for rank, (row, score) in enumerate(ranked[:k], start=1)]
                for ranked in self.search(queries, k)]

    def save(self, folder):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SETTINGS_FILE).write_text(json.dumps(asdict(self.settings), indent=1))
        with open(folder / "documents.jsonl", "w", encoding="utf-8") as file:
            for doc_id, title in zip(self.doc_ids, self.titles, strict=True):
                file.write(json.dumps({"id": doc_id, "title": title}, ensure_ascii=False) + "\n")
        if self.bm25 is not None:
            self.bm25.save(folder / "bm25")
        if self.encoder is not None:
            self.encoder.save(folder / "encoder")
            np.save(folder / "embeddings.npy", self.index.embeddings)
            if isinstance(self.index, PassageIndex):
                np.save(folder / OWNERS_FILE, self.index.owners)
            if self.index.approximate:
                self.index.save(folder / GRAPH_FILE)

    @classmethod
    def load(cls, folder):
        folder = Path(folder)
        settings = SearchSettings(**json.loads((folder / SETTINGS_FILE).read_text()))
        documents = [json.loads(line) for line in
                     text_lines((folder / "documents.jsonl").read_text("utf-8"))]
        encoder, embeddings, index = None, None, None
        if (folder / "encoder").is_dir():
            encoder, embeddings = DenseEncoder.load(folder / "encoder"), np.load(
                folder / "embeddings.npy")
            graph = ApproximateIndex.load(embeddings, folder / GRAPH_FILE) if (
                folder / GRAPH_FILE).is_file() else None
            if (folder / OWNERS_FILE).is_file():
                index = PassageIndex(embeddings, np.load(folder / OWNERS_FILE), graph=graph)
            else:
                index = graph
        return cls(settings, [d["id"] for d in documents], [d["title"] for d in documents],
                   BM25Index.load(folder / "bm25") if (folder / "bm25").is_dir() else None,
                   encoder, embeddings, index)


def _matching(ranked):
    """BM25's ranked documents that share a term with the query (score above 0)."""
    return [(row, score) for row, score in ranked if score > 0]


def _pairs(rows, scores):
    return [list(zip(r.tolist(), s.tolist(), strict=True)) for r, s in zip(rows, scores,
                                                                            strict=True)]
