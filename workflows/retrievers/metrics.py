"""Ranking metrics, as trec_eval computes them (the field's reference, used by BEIR).

`rankings` maps a query id to its ranked document ids (best first); `judgements` maps
a query id to `{document id: grade}` (grade > 0 is relevant). Every metric is a mean
over the judged queries; a judged query with no ranking scores 0.

- nDCG@k: the discounted cumulative gain `sum grade / log2(rank + 1)` of the top k,
  divided by the best possible one (linear gains, as trec_eval's `ndcg_cut`).
- recall@k: the share of a query's relevant documents found in its top k.
- MRR@k: `1 / rank` of the first relevant document in the top k.
- MAP@k: the mean of the precision at each relevant document found in the top k, over
  all the query's relevant documents (trec_eval's `map_cut`).
- weighted hit@k (the e-commerce system's rank-weighted hits, as we read them): the
  first relevant document at rank r <= k earns `(k + 1 - r) / k`, so 1 at rank 1.
"""

import math

import numpy as np

CUTOFFS = {"ndcg": 10, "recall": 100, "mrr": 10, "map": 100, "weighted_hit": (3, 10)}


def per_query(rankings, judgements):
    """`{query id: {metric name: value}}` for every judged query."""
    return {query: query_metrics(rankings.get(query, []), grades)
            for query, grades in judgements.items()}


def query_metrics(ranked, grades):
    relevant = {doc for doc, grade in grades.items() if grade > 0}
    hits = [doc in relevant for doc in ranked]
    metrics = {"ndcg_at_10": ndcg(ranked, grades, 10),
               "recall_at_100": sum(hits[:100]) / max(len(relevant), 1),
               "mrr_at_10": next((1 / (r + 1) for r, hit in enumerate(hits[:10]) if hit), 0.0),
               "map_at_100": average_precision(hits[:100], len(relevant))}
    for k in CUTOFFS["weighted_hit"]:
        first = next((r + 1 for r, hit in enumerate(hits[:k]) if hit), None)
        metrics[f"weighted_hit_at_{k}"] = (k + 1 - first) / k if first else 0.0
    return metrics


def ndcg(ranked, grades, k):
    gain = sum(grades.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    best = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return gain / best if best > 0 else 0.0


def average_precision(hits, relevant_count):
    found, total = 0, 0.0
    for rank, hit in enumerate(hits, start=1):
        if hit:
            found += 1
            total += found / rank
    return total / relevant_count if relevant_count else 0.0


def mean(table):
    """The mean of each metric over the queries of a `per_query` table."""
    names = next(iter(table.values())).keys() if table else ()
    return {name: float(np.mean([row[name] for row in table.values()])) for name in names}
