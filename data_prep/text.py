"""From text to token ids, in few fixed shapes; importing it loads no TensorFlow.

- `normalize_text`: the one normalization of every text the kit reads from a user's
  file, and the controls every `TextVectorization` standardization turns into spaces.
- Cleaning (HTML tags and entities) and sentence slices of reviews, in plain Python.
- The standardizations of the kit's `TextVectorization` layers (TensorFlow ops run
  inside the layer; registered with Keras on first use, so saved models load).
- WordPiece: a pretrained encoder's tokenizer (Hugging Face `tokenizers`), and
  vocabularies learned with keras-hub that keep case, accents and punctuation.
- Padded rows and length buckets under a token budget: the few batch shapes a
  compiler sees (`core/devices.py` turns them into batches for `fit`).
"""

import html
import random
import re
import string
import unicodedata
from dataclasses import dataclass

import numpy as np

from data_prep.pipelines import untuned

HTML_TAG = re.compile(r"<[^>]+>")
WHITESPACE = re.compile(r"\s+")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# ## Texts as they really come
# A user's file may hold any Unicode. Two kinds of character break a vocabulary: line
# breaks that Python's `str.splitlines` honours inside one line of a vocabulary file
# (U+0085, U+2028, U+2029, U+001C-U+001E, vertical tab, form feed; Keras's
# `TextVectorization` reloads its vocabulary with it) and controls that TensorFlow's
# string ops cut a text at (NUL). Texts scraped through Windows-1252 carry that code
# page's quotes, dashes and ellipsis as C1 controls (U+0091 for a left quote, U+0085
# for "..."): they are repaired, not dropped.

_TEXT_REPAIRS = str.maketrans({  # C1 controls as Windows-1252 (its 5 holes: a space)
    **{code: bytes([code]).decode("cp1252", errors="replace").replace("\ufffd", " ")
       for code in range(0x80, 0xA0)},
    0xFEFF: None})  # a byte-order mark
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # Unicode's Cc, Zl and Zp
OTHER_SPACES = re.compile("[\xa0\u1680\u2000-\u200a\u202f\u205f\u3000]")  # Zs but " "
TF_CONTROLS = r"[\p{Cc}\p{Zl}\p{Zp}\x{FEFF}]"  # the same in RE2, for TensorFlow's ops


def normalize_text(text):
    """`text` as the kit keeps it: C1 controls read as Windows-1252 (U+0085 -> "…",
    U+0092 -> "’"), byte-order marks dropped, every other control character and line
    or paragraph separator (tabs and line breaks too; CRLF is one) a space, then NFC (an
    accent typed as a combining mark and a precomposed one are one letter) and every
    other space (no-break, ideographic, ...) a plain one: keras-hub's WordPiece reads
    its vocabulary back with `str.rstrip`, which drops them. Letters,
    marks, emoji, zero-width joiners and every script are kept as they are."""
    text = CONTROLS.sub(" ", text.replace("\r\n", "\n").translate(_TEXT_REPAIRS))
    return OTHER_SPACES.sub(" ", unicodedata.normalize("NFC", text))


TEXT_NORMALIZATION = "normalize_text-1"  # in the cache keys of what a reader prepared


def looks_binary(head):
    """Whether a file's first bytes are no text: NUL bytes past a tenth of them (an
    archive, an image, UTF-16 without its byte-order mark; with it, decoding as UTF-8
    fails and says so). A NUL here and there is a control character a text may hold."""
    return head.count(b"\0") > len(head) // 10


def without_controls(texts):
    """TensorFlow op: every control character, line or paragraph separator and
    byte-order mark of `texts` a space. The first step of every standardization here, so
    a raw string given to a saved model can never put a line break (or a NUL, which
    TensorFlow's string ops end a text at) into a token of its vocabulary."""
    import tensorflow as tf  # only inside TextVectorization: this module loads without TF

    return tf.strings.regex_replace(texts, TF_CONTROLS, " ")


def sentences_of(text):
    """`text`'s sentences (split after `.`, `!` or `?`), empty ones left out."""
    return [s for s in SENTENCE_END.split(text) if s.strip()]



def text_lines(text):
    """The lines of `text` (str or bytes), split at line feeds only (`\\r\\n` too).
    `str.splitlines` also splits at characters found inside real text (U+0085 in IMDB
    reviews, U+2028, form feeds), which cuts a review, a query or a JSON line in two."""
    newline, carriage = ("\n", "\r") if isinstance(text, str) else (b"\n", b"\r")
    lines = text.split(newline)
    if lines and not lines[-1]:
        lines.pop()
    return [line[:-1] if line.endswith(carriage) else line for line in lines]

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
            sentences = sentences_of(text) or [text]
            length = rng.randint(1, 2)
            start = (rng.randrange(len(sentences)) if place == "anywhere"
                     else max(len(sentences) - length, 0))
            slices.append(" ".join(sentences[start:start + length]))
    return slices


# ## Standardizations for `TextVectorization` (TensorFlow ops, run inside the layer)

PUNCTUATION = re.escape(string.punctuation)


def standardize_review(texts):
    """TextVectorization standardization: lowercase, drop HTML tags, entities, punctuation.

    Used by the vectorizer inside exported models, so raw reviews (with `<br />`)
    are cleaned exactly as the training data was.
    """
    import tensorflow as tf  # only inside TextVectorization: this module loads without TF

    texts = tf.strings.lower(without_controls(texts))
    texts = tf.strings.regex_replace(texts, r"<[^>]+>|&[a-z]+;|&#[0-9]+;", " ")
    return tf.strings.regex_replace(texts, f"[{PUNCTUATION}]", "")


def separate_review_punctuation(texts):
    """Like `standardize_review`, but each punctuation mark becomes a token of its own
    ("great!" -> "great !"): n-gram models use "!" and "?" as evidence."""
    import tensorflow as tf  # likewise

    texts = tf.strings.lower(without_controls(texts))
    texts = tf.strings.regex_replace(texts, r"<[^>]+>|&[a-z]+;|&#[0-9]+;", " ")
    return tf.strings.regex_replace(texts, f"([{PUNCTUATION}])", r" \1 ")


SPANISH_PUNCTUATION = re.escape(string.punctuation.replace("[", "").replace("]", "") + "¿¡")


def standardize_spanish(texts):
    """The tutorial's Spanish standardization: lowercase, strip punctuation and `¿`/`¡`.

    Square brackets are kept so the `[start]` and `[end]` markers survive.
    """
    import tensorflow as tf  # likewise

    texts = tf.strings.lower(without_controls(texts))
    return tf.strings.regex_replace(texts, f"[{SPANISH_PUNCTUATION}]", "")


def standardize_any_language(texts):
    """TextVectorization standardization of a user's texts, in any language: every
    letter lowercased (not only ASCII ones), HTML tags and entities dropped, and every
    Unicode punctuation mark; accents and non-Latin scripts are kept as they are."""
    import tensorflow as tf  # likewise

    texts = tf.strings.lower(without_controls(texts), encoding="utf-8")
    texts = tf.strings.regex_replace(texts, r"<[^>]+>|&[a-z]+;|&#[0-9]+;", " ")
    return tf.strings.regex_replace(texts, r"\p{P}", "")


def standardize_sentence(texts):
    """A translation corpus's sentences in any language: every letter lowercased, every
    Unicode punctuation mark dropped but square brackets (the `[start]` and `[end]`
    markers survive); accents and non-Latin scripts kept."""
    import tensorflow as tf  # likewise

    texts = tf.strings.lower(without_controls(texts), encoding="utf-8")
    return tf.strings.regex_replace(texts, r"[^\P{P}\[\]]", "")


STANDARDIZATIONS = (standardize_review, separate_review_punctuation, standardize_spanish,
                    standardize_any_language, standardize_sentence)


def register_standardizations():
    """Registers the standardizations with Keras as `nlpkit>name` (once): a model whose
    `TextVectorization` uses one saves and loads. Called before such a layer is built or
    loaded, so that importing this module loads no Keras."""
    import keras

    for function in STANDARDIZATIONS:
        if keras.saving.get_registered_object(f"nlpkit>{function.__name__}") is None:
            keras.saving.register_keras_serializable(package="nlpkit")(function)


# ## BERT's WordPiece tokenization through Hugging Face `tokenizers`: pretrained encoders

MAX_WORD_CHARACTERS = 100


class WordPiece:
    """`WordPiece(vocabulary, lowercase)(texts)`: each text's token ids."""

    def __init__(self, vocabulary, lowercase=True, unknown="[UNK]"):
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

        self.ids = {token: i for i, token in enumerate(vocabulary)}
        self.lowercase, self.unknown = lowercase, self.ids[unknown]
        self.tokenizer = Tokenizer(models.WordPiece(
            self.ids, unk_token=unknown, max_input_chars_per_word=MAX_WORD_CHARACTERS))
        steps = [normalizers.NFKC()] if lowercase else []  # full-width letters, "…", "½"
        steps += [normalizers.Replace(Regex(r"[\p{Cc}&&[^\t\n\r]]"), " "),
                  normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                             strip_accents=lowercase, lowercase=lowercase)]
        self.tokenizer.normalizer = normalizers.Sequence(steps)
        self.tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    def __call__(self, texts):
        return [encoding.ids for encoding in
                self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids


# ## WordPiece vocabularies (keras-hub) that keep case, accents and punctuation

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")  # [PAD] is id 0


def learn_wordpiece(texts, vocabulary_size, special_tokens=SPECIAL_TOKENS):
    """A keras-hub WordPiece vocabulary learned from `texts` (case and accents kept).

    Unlike word-level vocabularies, punctuation and case survive, so a subword model
    writes readable text. The vocabulary starts with `special_tokens`.
    """
    import keras_hub  # with tensorflow-text, only to learn or apply WordPiece:
    import tensorflow as tf  # prepared token arrays load where they are absent (JAX)

    return keras_hub.tokenizers.compute_word_piece_vocabulary(
        untuned(tf.data.Dataset.from_tensor_slices(list(texts))).batch(1024),
        vocabulary_size, lowercase=False, strip_accents=False,
        reserved_tokens=list(special_tokens),
    )


def make_wordpiece_tokenizer(vocabulary, sequence_length=None, special_tokens=SPECIAL_TOKENS):
    """A keras-hub `WordPieceTokenizer` for a vocabulary from `learn_wordpiece`."""
    import keras_hub  # likewise

    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, sequence_length=sequence_length, lowercase=False,
        strip_accents=False, special_tokens=list(special_tokens),
    )


# ## Fixed batch shapes for sequences of many lengths: length buckets and a token budget

# Padded lengths tried in order; a plan keeps those below its longest length.
LADDER = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
EMPTY = -1  # the row index of a top-up row


def boundaries_up_to(max_length, ladder=LADDER):
    """`ladder`'s lengths below `max_length`, then `max_length`: 40 -> (8, 16, 24, 32, 40)."""
    return tuple(length for length in ladder if length < max_length) + (max_length,)


def boundaries_every(width, max_length):
    """Multiples of `width` below `max_length`, then `max_length`: 16, 40 -> (16, 32, 40)."""
    return boundaries_up_to(max_length, range(width, max_length, width))


@dataclass(frozen=True)
class BucketPlan:
    """Batch shapes: `(batch_size(b), boundaries[b])` for each bucket `b`.

    Args:
        boundaries: ascending padded lengths; the last is the longest row allowed.
        batch_tokens: padded tokens per batch (rows x length); each bucket's batch size
            is the largest multiple of `multiple` within it, at least `multiple`.
        rows: instead of `batch_tokens`, the same batch size for every bucket.
        multiple: batch sizes from `batch_tokens` are multiples of this (devices and
            tensor cores like 8).
    """

    boundaries: tuple
    batch_tokens: int | None = None
    rows: int | None = None
    multiple: int = 8

    def __post_init__(self):
        if list(self.boundaries) != sorted(set(self.boundaries)) or self.boundaries[0] < 1:
            raise ValueError(f"Bucket boundaries must ascend from 1 up, got {self.boundaries}.")
        if (self.batch_tokens is None) == (self.rows is None):
            raise ValueError("Give either batch_tokens or rows.")
        if min(self.batch_tokens or self.rows, self.multiple) < 1:
            raise ValueError("batch_tokens, rows and multiple must be positive.")

    @classmethod
    def single(cls, length, batch_size):
        """One shape, `(batch_size, length)`: fixed-length batches (no bucketing)."""
        return cls((length,), rows=batch_size)

    def batch_size(self, bucket):
        if self.rows:
            return self.rows
        rows = self.batch_tokens // self.boundaries[bucket]
        return max(self.multiple, rows // self.multiple * self.multiple)

    @property
    def shapes(self):
        return [(self.batch_size(b), length) for b, length in enumerate(self.boundaries)]

    def bucket_of(self, lengths):
        """Each length's bucket (lengths beyond the last boundary go to the last bucket)."""
        buckets = np.searchsorted(self.boundaries, np.asarray(lengths), side="left")
        return np.minimum(buckets, len(self.boundaries) - 1)

    def batches(self, lengths, seed=None):
        """`[(bucket, row indices)]`, every batch of its bucket's size, every row in one.

        Without `seed` (evaluation): in order of bucket and row, each bucket's last
        batch topped up with `EMPTY` rows. With `seed` (an epoch of training): rows
        shuffled within their bucket, the last batch filled with other rows of the
        bucket drawn at random (seen twice this epoch; `EMPTY` only where the bucket is
        smaller than a batch), and the batches shuffled.
        """
        buckets = self.bucket_of(lengths)
        rng = None if seed is None else np.random.default_rng(seed)
        batches = []
        for bucket in range(len(self.boundaries)):
            rows = np.flatnonzero(buckets == bucket)
            if rng is not None:
                rows = rng.permutation(rows)
            size = self.batch_size(bucket)
            for start in range(0, len(rows), size):
                chunk = rows[start:start + size]
                if rng is not None and len(chunk) < size:
                    others = rows[:start]  # the bucket's rows not in this batch
                    chunk = np.concatenate([chunk, rng.permutation(others)[:size - len(chunk)]])
                batches.append((bucket, topped_up(chunk, size)))
        if rng is not None:
            rng.shuffle(batches)
        return batches

    def padding_share(self, lengths):
        """The share of the batches' tokens that is padding (top-up rows included)."""
        lengths = np.asarray(lengths)
        padded = sum(len(rows) * self.boundaries[bucket] for bucket, rows in self.batches(lengths))
        return 1.0 - float(np.minimum(lengths, self.boundaries[-1]).sum()) / max(padded, 1)


def topped_up(rows, size):
    """`rows` spread evenly over `size` places, `EMPTY` between them: when devices split
    a batch into contiguous shards, none gets top-up rows alone."""
    batch = np.full(size, EMPTY, dtype=np.asarray(rows).dtype if len(rows) else "int64")
    batch[np.linspace(0, size, len(rows), endpoint=False).astype(int)] = rows
    return batch


def take_rows(rows, indices):
    """`rows[i]` for each of `indices`."""
    return [rows[i] for i in indices]


PAD_ID = 0  # the padding id of every vocabulary of the kit


def pad_rows(rows, length):
    """`(len(rows), length)` int32 ids: each row from the left, `PAD_ID` after it."""
    batch = np.full((len(rows), length), PAD_ID, "int32")
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    return batch
