"""Text cleaning in plain Python (no TensorFlow import)."""

import html
import random
import re

HTML_TAG = re.compile(r"<[^>]+>")
WHITESPACE = re.compile(r"\s+")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def clean_html(text):
    """Replaces tags such as `<br />` by spaces and decodes entities (`&amp;` -> `&`)."""
    return WHITESPACE.sub(" ", HTML_TAG.sub(" ", html.unescape(text))).strip()


SLICE_PLACES = ("anywhere", "end")


def sentence_slices(texts, count=1, seed=0, place="anywhere"):
    """`count` slices of each text, each one or two consecutive sentences (seeded): short
    texts with the style and labels of long ones. `place`: from a random place, or the
    text's last sentences, where a review usually gives its verdict. Text `i`'s slices
    are at `i`, `len(texts) + i`, ... of the result."""
    rng = random.Random(seed)
    slices = []
    for _ in range(count):
        for text in texts:
            sentences = [s for s in SENTENCE_END.split(text) if s.strip()] or [text]
            length = rng.randint(1, 2)
            start = (rng.randrange(len(sentences)) if place == "anywhere"
                     else max(len(sentences) - length, 0))
            slices.append(" ".join(sentences[start:start + length]))
    return slices
