"""Scoring retrievers on judged queries, and the choices made on validation: the hybrid's
weight, the fine-tuning's per-epoch figure, the approximate index's recall.

nDCG@10, recall@100, MRR@10, MAP@100 and the system's rank-weighted hits (`metrics.py`),
over every judged query of a split, with the queries answered per second.
"""

import dataclasses

from workflows.core.config import ConfigError
from workflows.retrievers import metrics


def validation_ndcg(config, data, encoder, bm25, held_out=None):
    """A function giving nDCG@10 of dense search on the validation queries, searched
    among a pool of documents (their judged ones and BM25's top `validation_pool_depth`
    for each), as the retriever searches them (whole, or by their best window of
    `passage_sentences`): cheap enough to compute every epoch. Without judged validation
    queries, on `held_out` pseudo-pairs `(queries, positives, rows)`: each row's text in
    the pool is its positive, the document less the query."""
    from workflows.retrievers.index import ExactIndex, PassageIndex, sentence_windows

    query_ids, query_texts, judged = data.split("validation")
    titles, texts = list(data.titles), list(data.texts)
    if not query_ids and held_out:
        query_texts, positives, rows = held_out
        query_ids = [f"held-out-{number}" for number in range(len(rows))]
        judged = {q: {data.doc_ids[row]: 1} for q, row in zip(query_ids, rows, strict=True)}
        for row, positive in zip(rows, positives, strict=True):
            titles[row], texts[row] = "", positive
    if not query_ids:
        raise ConfigError("Fine-tuning stops early on validation queries; this corpus has "
                          "none (raise --set validation_share).")
    rows, _ = bm25.search(query_texts, config.validation_pool_depth)
    row_of = {doc: row for row, doc in enumerate(data.doc_ids)}
    pool = sorted(set(rows.reshape(-1).tolist())
                  | {row_of[d] for grades in judged.values() for d in grades})
    if config.passage_sentences:
        documents, owners = sentence_windows([titles[r] for r in pool],
                                             [texts[r] for r in pool], config.passage_sentences)
    else:
        searchable = dataclasses.replace(data, titles=titles, texts=texts).searchable()
        documents = [searchable[r] for r in pool]

    def validate():
        embedded = encoder.encode(documents, config.document_length, config.encode_batch_size,
                                  label="Validation pool")
        index = PassageIndex(embedded, owners) if config.passage_sentences else ExactIndex(
            embedded)
        queries = encoder.encode(query_texts, config.query_length, config.encode_batch_size)
        found, _ = index.search(queries, 10)
        rankings = {q: [data.doc_ids[pool[r]] for r in ranked]
                    for q, ranked in zip(query_ids, found, strict=True)}
        return metrics.mean(metrics.per_query(rankings, judged))["ndcg_at_10"]

    return validate


def log_index_recall(searcher, data):
    """With an approximate index: its recall@10 against exact search, on the
    validation queries (else on the train queries), logged and said."""
    from workflows.retrievers.index import recall_against_exact

    if not getattr(searcher.index, "approximate", False):
        return
    from workflows.core import tracking

    _, texts, _ = data.split("validation")
    texts = texts or data.split("train")[1] or data.searchable()[:1000]
    recall = recall_against_exact(searcher.index, searcher.encode_queries(texts))
    tracking.log_metrics({"approximate_index": 1, "index_recall_at_10": recall})
    print(f"Approximate index (HNSW): recall@10 {recall:.4f} against exact search on "
          f"{len(texts)} queries")


def choose_hybrid_weight(config, data, searcher):
    """The convex combination's weight of the dense score with the best validation
    nDCG@10 (0 to 1 in steps of 0.1); the configured one when it is set."""
    if config.retriever != "hybrid" or config.fusion == "rrf" or config.hybrid_weight >= 0:
        return max(config.hybrid_weight, 0.0) if config.retriever == "hybrid" else 0.5
    if not data.split("validation")[0]:
        print("No judged validation queries to choose the hybrid's weight on: it is 0.5 "
              "(--set hybrid_weight=W sets another).")
        return 0.5
    scores = {}
    for step in range(11):
        weight = step / 10
        searcher.settings = dataclasses.replace(searcher.settings, hybrid_weight=weight)
        scores[weight] = score(searcher, data, "validation", k=100)["ndcg_at_10"]
    best = max(scores, key=lambda w: (scores[w], -abs(w - 0.5)))
    print("Validation nDCG@10 by hybrid weight: " + ", ".join(
        f"{w:.1f}: {s:.4f}" for w, s in scores.items()) + f"; chosen {best:.1f}")
    return best


def score(searcher, data, split, k=100, per_query=False):

    query_ids, query_texts, judged = data.split(split)
    if not query_ids:
        return {}
    rankings, seconds = searcher.rankings(query_ids, query_texts, k)
    table = metrics.per_query(rankings, judged)
    results = {**metrics.mean(table), "queries_per_second": len(query_ids) / seconds}
    return (results, table, rankings) if per_query else results
