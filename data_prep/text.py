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


def sentence_slices(texts, count=1, seed=0):
    """`count` slices of each text, each one or two consecutive sentences from a random
    place (seeded): short texts with the style and labels of long ones. Text `i`'s
    slices are at `i`, `len(texts) + i`, ... of the result."""
    rng = random.Random(seed)
    slices = []
    for _ in range(count):
        for text in texts:
            sentences = [s for s in SENTENCE_END.split(text) if s.strip()] or [text]
            start = rng.randrange(len(sentences))
            slices.append(" ".join(sentences[start:start + rng.randint(1, 2)]))
    return slices
