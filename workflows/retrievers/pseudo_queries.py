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
  teacher is right more often where it is surest.

`titles` and `sentences` give at most one pair per document, for `count` documents
drawn by a seeded choice, the positive the document's text without the query;
`hybrid_answers` gives one pair for each of at most `count` queries (a seeded choice),
the positive its answer's whole text. Hard negatives are mined as for judged pairs. A
corpus with no judged validation queries (a catalogue and nothing else) validates on
pseudo-pairs held out of training: each query searched among its positive and BM25's
pool for it.
"""

import random

from data_prep.text import SENTENCE_END

MIN_WORDS = 3  # a title or sentence shorter than this is not a query
MAX_HELD_OUT = 200  # pseudo-queries to validate on, each epoch, without judgements


def held_out_count(count, share):
    """How many pseudo-pairs are kept out of training to validate on: `share` of
    `count`, at most `MAX_HELD_OUT`."""
    return min(MAX_HELD_OUT, round(count * share))


def pseudo_pairs(data, source, count, seed, answer=None, share=1.0):
    """`(queries, positives, rows)`: the query text, the text it is paired with, and the
    corpus row it came from (or answers), at most `count` of them. `answer` (query texts
    -> their best rows and the lead of each over the second) labels `hybrid_answers`,
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
    return queries, positives, sources


def answered_queries(data, answer, count, seed, share=1.0):
    """At most `count` of the queries outside validation and test (a seeded choice),
    each with the whole text of the row `answer` gives it; of those, the `share` (at
    least one) whose answer leads the second by the widest margin, in the same order."""
    _, texts = data.queries_to_learn_from()
    random.Random(seed).shuffle(texts)
    queries = texts[:count]
    rows, leads = answer(queries) if queries else ([], [])
    surest = sorted(range(len(queries)), key=lambda i: -leads[i])
    kept = sorted(surest[:max(1, round(share * len(queries)))])
    queries, rows = [queries[i] for i in kept], [int(rows[i]) for i in kept]
    searchable = data.searchable()
    return queries, [searchable[row] for row in rows], rows


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
