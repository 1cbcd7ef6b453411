"""Putting BM25 and the dual encoder together, four ways.

Each function takes, per query, two ranked lists of document rows with their scores
(`bm25` and `dense`, best first) and returns one ranked list of `(row, score)`:

- `rerank`: BM25's top `depth`, re-ordered by the dense score ("BM25 refined by
  SBERT");
- `intersection`: the documents in both top-`depth` lists, in the dense order; the dense
  list alone when they share none;
- `hybrid`: a convex combination `weight * dense + (1 - weight) * bm25` of the scores,
  each min-max normalized over its list (a document missing from a list gets that
  list's minimum, 0 after normalization). Given the same rows twice, each scored by
  both retrievers, it is the lesson's `rescored` fusion: no document is scored as
  the least of a list it did not reach;
- `reciprocal_rank_fusion` (Cormack et al., 2009): the sum of `1 / (k + rank)` over
  the lists.
"""

import numpy as np


def rerank(bm25_rows, dense_scores_of_bm25_rows, depth):
    """BM25's first `depth` rows, ordered by their dense scores (given for those rows)."""
    rows = np.asarray(bm25_rows[:depth])
    scores = np.asarray(dense_scores_of_bm25_rows[:depth], "float32")
    order = np.argsort(-scores, kind="stable")
    return list(zip(rows[order].tolist(), scores[order].tolist(), strict=True))


def intersection(bm25_rows, dense_rows, dense_scores, depth):
    """The dense top `depth` kept where BM25's top `depth` has them too, in the dense
    order; the whole dense top `depth` when the two share nothing."""
    lexical = set(np.asarray(bm25_rows[:depth]).tolist())
    ranked = list(zip(np.asarray(dense_rows[:depth]).tolist(),
                      np.asarray(dense_scores[:depth], "float32").tolist(), strict=True))
    shared = [(row, score) for row, score in ranked if row in lexical]
    return shared or ranked


def min_max(scores):
    scores = np.asarray(scores, "float32")
    if scores.size == 0:
        return scores
    low, high = scores.min(), scores.max()
    return (scores - low) / (high - low) if high > low else np.ones_like(scores)


def hybrid(bm25_rows, bm25_scores, dense_rows, dense_scores, weight):
    """`weight * dense + (1 - weight) * bm25` over the union of the two lists, each list's
    scores min-max normalized first; best first."""
    fused = {}
    for rows, scores, share in ((bm25_rows, bm25_scores, 1.0 - weight),
                                (dense_rows, dense_scores, weight)):
        for row, score in zip(np.asarray(rows).tolist(), min_max(scores).tolist(),
                              strict=True):
            fused[row] = fused.get(row, 0.0) + share * score
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def reciprocal_rank_fusion(ranked_lists, k=60):
    """`sum over lists of 1 / (k + rank)` (ranks from 1), best first."""
    fused = {}
    for rows in ranked_lists:
        for rank, row in enumerate(np.asarray(rows).tolist(), start=1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))
