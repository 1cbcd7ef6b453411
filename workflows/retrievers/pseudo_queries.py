"""Training pairs made without judgements: a cold start, with no judgement read.

The deployment began with none, and tried back-translating its attribute lists into
labelled pairs. Three cheaper sources:

- `titles`: a document's title is a query for its text (the title left out of it):
  short noun phrases, like the deployment's product names;
- `sentences`: one sentence of a document is a query for the rest of it (the inverse
  cloze task, Lee et al., 2019): the sentence is left out, so matching it takes more
  than copying words;
- `hybrid_answers`: the corpus's own queries (outside validation and test; their texts
  only), each paired with the document that the hybrid of BM25 and the encoder as it
  is ranks first: pseudo-relevance labels (self-training), the queries the deployment
  has, and a teacher better than either half of it. With `share` below 1, only the
  queries whose first answer leads their second by the widest margin are kept: the
  teacher is right more often where it is surest. Each pair also names its rival, the
  teacher's second answer, and the first's lead over it: soft labels (`soft_targets`)
  share the target between the two, as sure of the first as the lead says.

`titles` and `sentences` give at most one pair per document, for `count` documents
drawn by a seeded choice, the positive the document's text without the query;
`hybrid_answers` gives one pair for each of at most `count` queries (a seeded choice),
the positive its answer's whole text. Hard negatives are mined as for judged pairs. A
corpus with no judged validation queries (a catalogue and nothing else) validates on
pseudo-pairs held out of training: each query searched among its positive and BM25's
pool for it.
"""

import math
import random
from typing import NamedTuple

from data_prep.text import SENTENCE_END

MIN_WORDS = 3  # a title or sentence shorter than this is not a query
MAX_HELD_OUT = 200  # pseudo-queries to validate on, each epoch, without judgements


def held_out_count(count, share):
    """How many pseudo-pairs are kept out of training to validate on: `share` of
    `count`, at most `MAX_HELD_OUT`."""
    return min(MAX_HELD_OUT, round(count * share))


class PseudoPairs(NamedTuple):
    """The query texts, the text each is paired with, the corpus row it came from (or
    answers), and for `hybrid_answers` each one's `(second row, lead)` (else None)."""

    queries: list
    positives: list
    rows: list
    rivals: list | None = None


def pseudo_pairs(data, source, count, seed, answer=None, share=1.0):
    """`PseudoPairs`, at most `count` of them. `answer` (query texts -> their first rows,
    the lead of each over the second, and the second rows) labels `hybrid_answers`,
    keeping the `share` of them it leads most."""
    if source == "hybrid_answers":
        return answered_queries(data, answer, count, seed, share)
    make = {"titles": _title_pair, "sentences": _sentence_pair}[source]
    rng = random.Random(seed)
    rows = list(range(len(data.doc_ids)))
    rng.shuffle(rows)
    queries, positives, sources = [], [], []
    for row in rows:
        pair = make(data.titles[row], data.texts[row], rng)
        if pair:
            queries.append(pair[0])
            positives.append(pair[1])
            sources.append(row)
            if len(queries) == count:
                break
    return PseudoPairs(queries, positives, sources)


def answered_queries(data, answer, count, seed, share=1.0):
    """At most `count` of the queries outside validation and test (a seeded choice),
    each with the whole text of the row `answer` gives it; of those, the `share` (at
    least one) whose answer leads the second by the widest margin, in the same order."""
    _, texts = data.queries_to_learn_from()
    random.Random(seed).shuffle(texts)
    queries = texts[:count]
    rows, leads, seconds = answer(queries) if queries else ([], [], [])
    surest = sorted(range(len(queries)), key=lambda i: -leads[i])
    kept = sorted(surest[:max(1, round(share * len(queries)))])
    searchable = data.searchable()
    return PseudoPairs([queries[i] for i in kept], [searchable[int(rows[i])] for i in kept],
                       [int(rows[i]) for i in kept],
                       [(int(seconds[i]), float(leads[i])) for i in kept])


def soft_targets(negatives, rivals, temperature):
    """`(negatives, shares)`: each pair's hard negative its rival where it has one (else
    the one given), and the first answer's share of the target `sigmoid(lead /
    temperature)`, the softmax of the two fused scores at that temperature (1 without
    a rival)."""
    chosen, shares = [], []
    for negative, (rival, lead) in zip(negatives, rivals, strict=True):
        chosen.append(rival if rival >= 0 else negative)
        shares.append(1.0 / (1.0 + math.exp(-lead / temperature)) if rival >= 0 else 1.0)
    return chosen, shares


def _title_pair(title, text, rng):
    if len(title.split()) >= MIN_WORDS and text.strip():
        return title.strip(), text.strip()
    return None


def _sentence_pair(title, text, rng):
    sentences = SENTENCE_END.split(text.strip())
    choices = [i for i, s in enumerate(sentences) if len(s.split()) >= MIN_WORDS]
    if len(sentences) < 2 or not choices:
        return None
    chosen = rng.choice(choices)
    rest = " ".join(s for i, s in enumerate(sentences) if i != chosen)
    return sentences[chosen], f"{title} {rest}".strip()
