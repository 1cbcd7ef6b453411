"""Tokenizations of the sentence pairs (`spa_eng.py`: spa-eng or a user's): the tutorial's words,
WordPiece per language, or one joint WordPiece vocabulary; token id arrays of every split
(cached in the work folder), and detokenization back to tidy text."""

import re
import string
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from data_prep import cache
from data_prep.spa_eng import (
    LANGUAGE_NAMES,
    SUBWORD_SPECIAL_TOKENS,
    SpaEngSettings,
    languages,
    make_vectorizers,
    mark_target,
    references_by_source,
)
from data_prep.text import learn_wordpiece, make_wordpiece_tokenizer

TOKENIZATIONS = ("word", "wordpiece", "joint_wordpiece")
SPLITS = ("train", "val", "test")
_NORMALIZE_DROP = str.maketrans("", "", string.punctuation + "¿¡«»“”‘’…")
_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]»”])")
_SPACE_AFTER = re.compile(r"([¿¡(\[«“]) ")
_INSIDE_WORD = re.compile(r"(?<=\w) ([-'’]) (?=\w)")  # don ' t -> don't, well - known


def normalize(text):
    """Lowercase, punctuation (incl. `¿¡`) removed, spaces collapsed: the tutorial's form."""
    return " ".join(text.lower().translate(_NORMALIZE_DROP).split())


def tidy(text):
    """Joins WordPiece output into written text: `¿ Qué hora es ?` -> `¿Qué hora es?`,
    `I don ' t know .` -> `I don't know.`"""
    text = _INSIDE_WORD.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))
    return _SPACE_AFTER.sub(r"\1", text).strip()


@dataclass
class Tokenizer:
    """Source text -> source ids and target ids -> target text for one tokenization."""

    kind: str
    source_vocabulary: list
    target_vocabulary: list
    sequence_length: int  # word tokenization: the tutorial's fixed length
    direction: str = "en-es"

    def __post_init__(self):
        self.source_language, self.target_language = languages(self.direction)
        if self.kind not in TOKENIZATIONS:
            raise ValueError(f"tokenization must be one of {TOKENIZATIONS}, got {self.kind!r}")
        if self.kind == "word":
            self.start_id = self.target_vocabulary.index("[start]")
            self.end_id = self.target_vocabulary.index("[end]")
        else:
            self.start_id = SUBWORD_SPECIAL_TOKENS.index("[START]")
            self.end_id = SUBWORD_SPECIAL_TOKENS.index("[END]")

    @property
    def vocabulary_sizes(self):
        return len(self.source_vocabulary), len(self.target_vocabulary)

    @property
    def source_name(self):
        return LANGUAGE_NAMES.get(self.source_language, self.source_language)

    def source_ids(self, sentences):
        """A list of int32 arrays, one per source sentence (no padding)."""
        return self._ids(sentences, "source")

    def target_ids(self, sentences):
        """`[start] ... [end]` id arrays, one per target sentence."""
        return self._ids(sentences, "target")

    def _ids(self, sentences, side):
        if self.kind == "word":
            return self._word_ids(sentences, side)
        return self._wordpiece_ids(sentences, side)

    def _word_ids(self, sentences, side):
        settings = SpaEngSettings(max_tokens=max(self.vocabulary_sizes),
                                  sequence_length=self.sequence_length)
        source, target = make_vectorizers(settings, self.source_vocabulary,
                                          self.target_vocabulary, self.direction)
        if side == "target":
            sentences = [mark_target(sentence) for sentence in sentences]
        vectorizer = source if side == "source" else target
        # TensorFlow strings: on other backends Keras reads a NumPy array as ASCII bytes
        import tensorflow as tf  # the word vectorizers are TensorFlow layers anyway

        ids = np.asarray(vectorizer(tf.constant(list(sentences), tf.string)), "int32")
        return [row[row != 0] for row in ids]

    def _wordpiece_ids(self, sentences, side):
        vocabulary = self.source_vocabulary if side == "source" else self.target_vocabulary
        tokenizer = make_wordpiece_tokenizer(vocabulary)
        ids = [np.asarray(row, "int32") for row in tokenizer(list(sentences))]
        if side == "target":
            ids = [np.concatenate([[self.start_id], row, [self.end_id]]).astype("int32")
                   for row in ids]
        return ids

    def detokenize(self, rows):
        """Target text for each row of target ids (start, end and padding dropped)."""
        texts = []
        for row in rows:
            ids = [int(i) for i in row if i not in (0, self.start_id)]
            if self.end_id in ids:
                ids = ids[:ids.index(self.end_id)]
            texts.append(self._join(ids))
        return texts

    def _join(self, ids):
        words = [self.target_vocabulary[i] for i in ids]
        if self.kind == "word":
            return " ".join(words)
        text = " ".join(words).replace(" ##", "").removeprefix("##")
        return tidy(text)


def load_tokenizer(prepared, kind, sequence_length=20, direction="en-es",
                   joint_vocabulary_size=8000, work_dir=None):
    if kind == "joint_wordpiece":
        joint = joint_wordpiece_vocabulary(prepared, joint_vocabulary_size, work_dir)
        return Tokenizer(kind, joint, joint, sequence_length, direction)
    vocabulary = prepared.vocabulary if kind == "word" else prepared.wordpiece_vocabulary
    return Tokenizer(kind, vocabulary("source", direction), vocabulary("target", direction),
                     sequence_length, direction)


def joint_wordpiece_vocabulary(prepared, size, work_dir=None):
    """One WordPiece vocabulary of `size` for both languages, learned on the train
    pairs' sentences (never val or test) once and cached."""
    path = (cache.work_dir(work_dir) / "tokens"
            / f"spa-eng-joint-wordpiece-{size}-{prepared.directory.name}.txt")

    def learn(partial):
        print(f"Learning one WordPiece vocabulary ({size} tokens) for both languages",
              flush=True)
        sentences = [sentence for pair in prepared.pairs("train") for sentence in pair]
        partial.write_text("\n".join(learn_wordpiece(sentences, size)), encoding="utf-8")

    return cache.produce_file(path, learn).read_text(encoding="utf-8").split("\n")


def token_arrays(prepared, tokenizer, work_dir=None):
    """`{split: (source_ids, target_ids)}` for every pair, tokenized once and cached."""
    settings = {"prepared": prepared.directory.name, "kind": tokenizer.kind,
                "length": tokenizer.sequence_length, "direction": tokenizer.direction}
    if tokenizer.kind == "joint_wordpiece":
        settings["vocabulary_size"] = len(tokenizer.source_vocabulary)
    key = cache.settings_key(settings)
    path = (cache.work_dir(work_dir) / "tokens"
            / f"spa-eng-{tokenizer.direction}-{tokenizer.kind}-{key}.npz")

    def tokenize(partial):
        with open(partial, "wb") as file:
            np.savez(file, **_tokenize_splits(prepared, tokenizer))

    return _unflatten(np.load(cache.produce_file(path, tokenize)))  # concurrent runs: once


def _tokenize_splits(prepared, tokenizer):
    arrays = {}
    with tqdm(total=2 * len(SPLITS), disable=None,
              desc=f"Tokenizing pairs ({tokenizer.direction}, {tokenizer.kind})") as progress:
        for split in SPLITS:
            pairs = prepared.pairs(split, tokenizer.direction)
            for side, ids in (("source", tokenizer.source_ids([s for s, _ in pairs])),
                              ("target", tokenizer.target_ids([t for _, t in pairs]))):
                arrays[f"{split}_{side}_flat"] = np.concatenate(ids).astype("int32")
                arrays[f"{split}_{side}_lengths"] = np.asarray([len(r) for r in ids], "int32")
                progress.update()
    return arrays


def _unflatten(stored):
    def rows(prefix):
        offsets = np.concatenate([[0], np.cumsum(stored[f"{prefix}_lengths"])])
        flat = stored[f"{prefix}_flat"]
        return [flat[start:end] for start, end in zip(offsets[:-1], offsets[1:], strict=True)]

    return {split: (rows(f"{split}_source"), rows(f"{split}_target")) for split in SPLITS}


def references(pairs):
    """(source sentences, [their references]) grouped by source sentence."""
    grouped = references_by_source(pairs)
    return list(grouped), list(grouped.values())
