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
- reciprocal-rank sum@k: `1 / rank` of every relevant document in the top k, added up
  (at most 1 + 1/2 + ... + 1/k: 2.283 for k = 5).

The e-commerce deployment the retrieval lesson reproduces scored its 20 judged products
with two sums over the queries: its metric 1 (1/rank of the best answer in the top 10;
20 is perfect) is `mrr_at_10` times the number of queries, and its metric 2 (1/rank of
every relevant answer in the top 5; 45.7 is perfect) is `reciprocal_rank_sum_at_5` times
the number of queries.
"""

import math

import numpy as np


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
               "map_at_100": average_precision(hits[:100], len(relevant)),
               "reciprocal_rank_sum_at_5": sum(1 / (r + 1) for r, hit in enumerate(hits[:5])
                                               if hit)}
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
