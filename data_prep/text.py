"""Text cleaning in plain Python (no TensorFlow import)."""

import html
import re

HTML_TAG = re.compile(r"<[^>]+>")
WHITESPACE = re.compile(r"\s+")


def clean_html(text):
    """Replaces tags such as `<br />` by spaces and decodes entities (`&amp;` -> `&`)."""
    return WHITESPACE.sub(" ", HTML_TAG.sub(" ", html.unescape(text))).strip()
