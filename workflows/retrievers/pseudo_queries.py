"""Training pairs made from the corpus alone: a cold start, with no judgements read.

The deployment began with none, and tried back-translating its attribute lists into
labelled pairs. Two cheaper sources that need nothing but the documents:

- `titles`: a document's title is a query for its text (the title left out of it):
  short noun phrases, like the deployment's product names;
- `sentences`: one sentence of a document is a query for the rest of it (the inverse
  cloze task, Lee et al., 2019): the sentence is left out, so matching it takes more
  than copying words.

Each gives at most one pair per document, for `count` documents drawn by a seeded
choice. The positive is the document's text without the query; hard negatives are
mined from BM25 as for judged pairs. A corpus with no judged validation queries (a
catalogue and nothing else) validates on pseudo-pairs held out of training: each
query searched among its document's text less the query and BM25's pool for it.
"""

import random

from data_prep.text import SENTENCE_END

SOURCES = ("none", "titles", "sentences")
MIN_WORDS = 3  # a title or sentence shorter than this is not a query
MAX_HELD_OUT = 200  # pseudo-queries to validate on, each epoch, without judgements


def held_out_count(count, share):
    """How many pseudo-pairs are kept out of training to validate on: `share` of
    `count`, at most `MAX_HELD_OUT`."""
    return min(MAX_HELD_OUT, round(count * share))


def pseudo_pairs(data, source, count, seed):
    """`(queries, positives, rows)`: the query text, the text it is paired with, and the
    corpus row it came from, for at most `count` documents."""
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
