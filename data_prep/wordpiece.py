"""BERT's WordPiece tokenization in plain Python: pretrained encoders read text the way
they were trained to, on any backend and without TensorFlow.

As BERT's reference tokenizer: invisible characters dropped, control characters read as
spaces, CJK characters split apart, optional lowercasing (with compatibility forms
normalized, NFKC, and accents stripped), punctuation split off, then each word
greedily cut into the longest pieces of the vocabulary (`##` marks a piece inside a
word); a word with no such cut, or over 100 characters, is `[UNK]`.
"""

import unicodedata
from functools import lru_cache

MAX_WORD_CHARACTERS = 100
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


class WordPiece:
    """`WordPiece(vocabulary, lowercase)(texts)`: each text's token ids."""

    def __init__(self, vocabulary, lowercase=True, unknown="[UNK]"):
        self.ids = {token: i for i, token in enumerate(vocabulary)}
        self.lowercase, self.unknown = lowercase, self.ids[unknown]
        self.word_ids = lru_cache(maxsize=1 << 18)(self._word_ids)

    def __call__(self, texts):
        return [self.encode(text) for text in texts]

    def encode(self, text):
        return [i for word in words(text, self.lowercase) for i in self.word_ids(word)]

    def _word_ids(self, word):
        if len(word) > MAX_WORD_CHARACTERS:
            return (self.unknown,)
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    pieces.append(self.ids[piece])
                    break
                end -= 1
            if end == start:
                return (self.unknown,)
            start = end
        return tuple(pieces)


def words(text, lowercase=True):
    """BERT's basic tokenization: the words and punctuation marks of `text`."""
    if lowercase:  # compatibility forms too: full-width letters, "…", "½"
        text = unicodedata.normalize("NFKC", text)
    spaced = []
    for character in text:
        code, kind = ord(character), unicodedata.category(character)
        if code == 0xFFFD or kind == "Cf":  # invisible: zero-width spaces, soft hyphens
            continue
        if any(low <= code <= high for low, high in CJK_RANGES):
            spaced += [" ", character, " "]
        else:  # control characters (IMDB's "\x97" dashes) part words like spaces
            spaced.append(" " if character.isspace() or kind == "Cc" else character)
    result = []
    for word in "".join(spaced).split():
        if lowercase:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                           if unicodedata.category(c) != "Mn")
        result += _split_punctuation(word)
    return result


def _split_punctuation(word):
    pieces, current = [], ""
    for character in word:
        if _is_punctuation(character):
            pieces += [current, character] if current else [character]
            current = ""
        else:
            current += character
    return pieces + [current] if current else pieces


def _is_punctuation(character):
    code = ord(character)
    return (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
            or unicodedata.category(character).startswith("P"))
