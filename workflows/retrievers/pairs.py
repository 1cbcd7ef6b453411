"""What the dual encoder learns from: `(query, document)` pairs, a hard negative for
each, and the batches they make.

The pairs come from the train judgements or, for a corpus with none, from the corpus
itself (`pseudo_queries.py`: titles, sentences, or the answers of the zero-shot hybrid).
The hard negatives are the top unjudged documents of BM25 or of the encoder before
fine-tuning; `passages` cuts each pair's documents to the window the encoder finds best.
A batch holds no document twice, so that no pair's document is another's negative.
"""

from typing import NamedTuple

import keras
import numpy as np

from workflows.core.config import ConfigError
from workflows.retrievers.config import fine_tunes
from workflows.retrievers.dense import pad
from workflows.retrievers.index import corpus_index, sentence_windows


class TrainingPairs(NamedTuple):
    """What fine-tuning reads: the query texts, `(query, document row)` pairs, each
    query's corpus rows, the document texts, the corpus row of each document text (a
    cold start's positives follow the corpus), pseudo-pairs held out to validate on
    (`(queries, positives, rows)`) when the corpus has no judged validation queries, and
    each pair's rival `(row, lead)` when a teacher answered it (`hybrid_answers`)."""

    query_texts: list
    pairs: list
    judged_rows: list
    documents: list
    sources: list | None = None
    held_out: tuple | None = None
    rivals: list | None = None


def training_pairs(config, data, answer=None):
    """The `TrainingPairs` of the train judgements, or for a cold start with none read:
    each pseudo-query paired with its document's text less the query, or each query
    with the row `answer` (query texts -> rows) gives it."""
    from workflows.retrievers import pseudo_queries

    if config.pseudo_queries != "none":
        held = 0 if data.split("validation")[0] else pseudo_queries.held_out_count(
            config.pseudo_query_count, config.validation_share)
        made = pseudo_queries.pseudo_pairs(
            data, config.pseudo_queries, config.pseudo_query_count + held, config.seed,
            answer, config.answer_share)
        parts = (made.queries, made.positives, made.rows)
        held_out = tuple(part[:held] for part in parts) if held else None
        queries, positives, rows = (part[held:] for part in parts)
        if not queries:
            raise ConfigError(
                "pseudo_queries=hybrid_answers learns from the corpus's queries outside "
                "validation and test; this corpus has none (give --queries, or use titles "
                "or sentences)." if config.pseudo_queries == "hybrid_answers" else
                f"No document gives a pseudo-query from its {config.pseudo_queries}; try "
                "--set pseudo_queries=sentences.")
        corpus = len(data.doc_ids)
        return TrainingPairs(queries, [(q, corpus + q) for q in range(len(queries))],
                             [{r} for r in rows], data.searchable() + positives,
                             list(range(corpus)) + rows, held_out,
                             made.rivals and made.rivals[held:])
    query_ids, query_texts, judged = data.split("train")
    if not query_ids:
        raise ConfigError("Fine-tuning needs train judgements; this corpus has none: "
                          "--set pseudo_queries=titles (or sentences) makes pairs from the "
                          "corpus, --set epochs=0 uses the encoder as it is.")
    row_of = {doc: row for row, doc in enumerate(data.doc_ids)}
    judged_rows = [{row_of[d] for d in judged[q]} for q in query_ids]
    pairs = [(q, row) for q in range(len(query_ids)) for row in sorted(judged_rows[q])]
    return TrainingPairs(query_texts, pairs, judged_rows, data.searchable())


def hybrid_answers(config, data, encoder, bm25, work_dir):
    """Query texts -> `(rows, leads, seconds)`: each one's first row by the hybrid of
    BM25 and `encoder` as it is now (weight 0.5: no judgement chooses it), its fused
    score's lead over the second's, and the second row (-1 if none): the teacher of
    `hybrid_answers`, how sure it is, and its runner-up."""
    from workflows.retrievers.searcher import Searcher, SearchSettings

    settings = SearchSettings("hybrid", query_length=config.query_length,
                              encode_batch_size=config.encode_batch_size)
    searcher = Searcher(settings, data.doc_ids, data.titles, bm25, encoder,
                        index=corpus_index(config, data, encoder, work_dir))

    def answer(texts):
        found = searcher.search(texts, k=2)
        return ([ranked[0][0] for ranked in found],
                [ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0.0) for ranked in found],
                [ranked[1][0] if len(ranked) > 1 else -1 for ranked in found])

    return answer


def candidate_rows(config, data, made, encoder, bm25, work_dir):
    """Each training query's top corpus rows, deep enough to hold `negatives_depth`
    unjudged ones: BM25's, or (`negatives_from=encoder`) the encoder's before fine-tuning."""
    depth = config.negatives_depth + max(map(len, made.judged_rows))
    if config.negatives_from == "bm25":
        return bm25.search(made.query_texts, depth)[0]
    index = corpus_index(config, data, encoder, work_dir)
    queries = encoder.encode(made.query_texts, config.query_length, config.encode_batch_size,
                             label="Mining negatives")
    return index.search(queries, depth)[0]


def passage_pairs(config, data, encoder, made, negatives, work_dir):
    """`(made, negatives)` with each pair's document and hard negative cut to the window
    of it that `encoder`, before fine-tuning, finds best for the query
    (`positives=passages`): the encoder learns to rank the windows it will search."""
    index = corpus_index(config, data, encoder, work_dir)
    windows, _ = sentence_windows(data.titles, data.texts, config.passage_sentences)
    vectors = encoder.encode(made.query_texts, config.query_length, config.encode_batch_size)
    sources = made.sources or range(len(made.documents))
    queries = [query for query, _ in made.pairs]
    rows = [sources[document] for _, document in made.pairs] + list(negatives)
    chosen = index.best_window_in(vectors[queries + queries], rows)
    count = len(queries)
    return made._replace(pairs=list(zip(queries, range(count), strict=True)),
                         documents=[windows[window] for window in chosen],
                         sources=rows), list(range(count, 2 * count))


def most_pairs(config, data):
    """The most pairs a fine-tune of `config` can have, known before any is made."""
    if config.pseudo_queries == "hybrid_answers":
        return min(config.pseudo_query_count, len(data.queries_to_learn_from()[0]))
    if config.pseudo_queries != "none":
        return min(config.pseudo_query_count, len(data.doc_ids))
    return sum(map(len, data.split("train")[2].values()))


def check_pairs_can_fill_a_batch(config, data):
    """A batch larger than every pair there could be is refused before any run starts
    (a batch the pairs fill only with a document twice is found once they are made; no
    pair at all, with the reason, when they are made)."""
    if not (config.epochs and fine_tunes(config)):
        return
    most = most_pairs(config, data)
    if 0 < most < config.batch_size:
        raise ConfigError(f"No batch of {config.batch_size} pairs can be made of at most "
                          f"{most:,} pairs: lower --set batch_size.")


class QueryDocumentBatches(keras.utils.PyDataset):
    """One epoch of `(inputs, targets)` batches: `batch_size` (query, relevant document)
    pairs, no document twice in a batch (it would be another query's false negative),
    each query with `negatives[pair]` (hard negatives) after the in-batch documents.
    Seeded by the epoch; `skip` resumes mid-epoch; a short last batch is dropped, so
    every batch has one shape. `sources[row]`: the corpus document a document row is
    made from (a pseudo-query's positive is its document less the query), so that
    document is not another pair's negative in the same batch. A query's target is its
    document, or with `shares` the share `shares[pair]` of it and the rest its negative."""

    def __init__(self, query_ids, document_ids, pairs, negatives, batch_size, query_length,
                 document_length, seed, order=None, sources=None, shares=None):
        super().__init__()
        self.sources = sources or range(len(document_ids))
        self.shares = shares
        self.query_ids, self.document_ids = query_ids, document_ids
        self.pairs, self.negatives = pairs, negatives
        self.batch_size, self.seed = batch_size, seed
        self.query_length, self.document_length = query_length, document_length
        self.order = self._batches() if order is None else order

    def _batches(self):
        """Each pair, in a seeded order, joins the first open batch that holds neither
        its document nor its negative; full batches close, unfilled ones are dropped."""
        rng = np.random.default_rng(self.seed)
        full, open_batches = [], []
        for pair in rng.permutation(len(self.pairs)).tolist():
            documents = {self.sources[self.pairs[pair][1]], self.sources[self.negatives[pair]]}
            batch = next((b for b in open_batches if not documents & b["documents"]), None)
            if batch is None:
                batch = {"pairs": [], "documents": set()}
                open_batches.append(batch)
            batch["pairs"].append(pair)
            batch["documents"] |= documents
            if len(batch["pairs"]) == self.batch_size:
                open_batches.remove(batch)
                full.append(batch["pairs"])
        return full

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        pairs = self.order[index]
        queries = [self.query_ids[self.pairs[p][0]] for p in pairs]
        documents = ([self.document_ids[self.pairs[p][1]] for p in pairs]
                     + [self.document_ids[self.negatives[p]] for p in pairs])
        query_ids, query_mask = pad(queries, self.query_length, len(queries))
        document_ids, document_mask = pad(documents, self.document_length, len(documents))
        inputs = {"query_ids": query_ids, "query_mask": query_mask,
                  "document_ids": document_ids, "document_mask": document_mask}
        return inputs, self._targets(pairs)

    def _targets(self, pairs):
        """`(queries, 2 * queries)`: each query's share of its document (the diagonal)
        and of its hard negative (after the in-batch documents)."""
        count = len(pairs)
        shares = np.array([self.shares[p] for p in pairs] if self.shares else [1.0] * count,
                          "float32")
        targets = np.zeros((count, 2 * count), "float32")
        targets[np.arange(count), np.arange(count)] = shares
        targets[np.arange(count), count + np.arange(count)] = 1.0 - shares
        return targets

    def skip(self, count):
        return QueryDocumentBatches(self.query_ids, self.document_ids, self.pairs, self.negatives,
                           self.batch_size, self.query_length, self.document_length,
                           self.seed, self.order[count:], self.sources, self.shares)


def hard_negatives(bm25_rows, pairs, judged_rows, depth, seed, corpus_size):
    """For each `(query, document)` pair, a document BM25 ranks in the query's top
    `depth` that is not judged for it (seeded choice); a random unjudged one if none."""
    rng = np.random.default_rng(seed)
    negatives = []
    for query, _ in pairs:
        candidates = [r for r in bm25_rows[query][:depth] if r not in judged_rows[query]]
        if not candidates:  # every BM25 candidate is judged: any other document
            candidates = [r for r in range(corpus_size) if r not in judged_rows[query]] or [0]
        negatives.append(int(candidates[rng.integers(len(candidates))]))
    return negatives
