"""Translation data for training and decoding: token id arrays, batches, detokenization.

Two tokenizations of the prepared spa-eng pairs (`data_prep.spa_eng`):
`word` is the tutorial's (lowercased, punctuation stripped, 15,000-word
vocabularies, length 20); `wordpiece` keeps case and punctuation with keras-hub
WordPiece vocabularies, so the model writes readable Spanish. Token ids are cached as
numpy arrays (`tokens-<key>.npz` under the work folder), which is also how a model
is trained on another backend: the batches are plain numpy.
"""

import os
import re
import string
from dataclasses import dataclass

import keras
import numpy as np

from data_prep import cache
from data_prep.spa_eng import SUBWORD_SPECIAL_TOKENS, mark_target

TOKENIZATIONS = ("word", "wordpiece")
SPLITS = ("train", "val", "test")
_NORMALIZE_DROP = str.maketrans("", "", string.punctuation + "¿¡«»“”‘’…")
_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]»”])")
_SPACE_AFTER = re.compile(r"([¿¡(\[«“]) ")


def normalize(text):
    """Lowercase, punctuation (incl. `¿¡`) removed, spaces collapsed: the tutorial's form."""
    return " ".join(text.lower().translate(_NORMALIZE_DROP).split())


def tidy_spanish(text):
    """Joins WordPiece output into written Spanish: `¿ Qué hora es ?` -> `¿Qué hora es?`."""
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text)).strip()


@dataclass
class Tokenizer:
    """English -> source ids and target ids -> Spanish for one tokenization."""

    kind: str
    source_vocabulary: list
    target_vocabulary: list
    sequence_length: int  # word tokenization: the tutorial's fixed length

    def __post_init__(self):
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

    def source_ids(self, sentences):
        """A list of int32 arrays, one per English sentence (no padding)."""
        return self._ids(sentences, "source")

    def target_ids(self, sentences):
        """`[start] ... [end]` id arrays, one per Spanish sentence."""
        return self._ids(sentences, "target")

    def _ids(self, sentences, side):
        if self.kind == "word":
            return self._word_ids(sentences, side)
        return self._wordpiece_ids(sentences, side)

    def _word_ids(self, sentences, side):
        from data_prep.spa_eng import SpaEngSettings, make_vectorizers

        settings = SpaEngSettings(max_tokens=max(self.vocabulary_sizes),
                                  sequence_length=self.sequence_length)
        source, target = make_vectorizers(settings, self.source_vocabulary,
                                          self.target_vocabulary)
        if side == "target":
            sentences = [mark_target(sentence) for sentence in sentences]
        vectorizer = source if side == "source" else target
        ids = np.asarray(vectorizer(np.asarray(sentences, dtype=object)), "int32")
        return [row[row != 0] for row in ids]

    def _wordpiece_ids(self, sentences, side):
        from data_prep.spa_eng import make_wordpiece_tokenizer

        vocabulary = self.source_vocabulary if side == "source" else self.target_vocabulary
        tokenizer = make_wordpiece_tokenizer(vocabulary)
        ids = [np.asarray(row, "int32") for row in tokenizer(list(sentences))]
        if side == "target":
            ids = [np.concatenate([[self.start_id], row, [self.end_id]]).astype("int32")
                   for row in ids]
        return ids

    def detokenize(self, rows):
        """Spanish text for each row of target ids (start, end and padding dropped)."""
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
        return tidy_spanish(text)


def load_tokenizer(prepared, kind, sequence_length=20):
    if kind == "word":
        return Tokenizer(kind, prepared.vocabulary("source"), prepared.vocabulary("target"),
                         sequence_length)
    return Tokenizer(kind, prepared.wordpiece_vocabulary("source"),
                     prepared.wordpiece_vocabulary("target"), sequence_length)


def token_arrays(prepared, tokenizer, work_dir=None):
    """`{split: (source_ids, target_ids)}` for every pair, tokenized once and cached."""
    key = cache.settings_key({"prepared": prepared.directory.name, "kind": tokenizer.kind,
                              "length": tokenizer.sequence_length})
    path = cache.work_dir(work_dir) / "tokens" / f"spa-eng-{tokenizer.kind}-{key}.npz"
    if not path.exists():
        arrays = {}
        for split in SPLITS:
            pairs = prepared.pairs(split)
            for side, ids in (("source", tokenizer.source_ids([e for e, _ in pairs])),
                              ("target", tokenizer.target_ids([s for _, s in pairs]))):
                arrays[f"{split}_{side}_flat"] = np.concatenate(ids).astype("int32")
                arrays[f"{split}_{side}_lengths"] = np.asarray([len(r) for r in ids], "int32")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".partial-{os.getpid()}-{path.name}")
        with open(partial, "wb") as file:
            np.savez(file, **arrays)
        os.replace(partial, path)
    return _unflatten(np.load(path))


def _unflatten(stored):
    def rows(prefix):
        offsets = np.concatenate([[0], np.cumsum(stored[f"{prefix}_lengths"])])
        flat = stored[f"{prefix}_flat"]
        return [flat[start:end] for start, end in zip(offsets[:-1], offsets[1:], strict=True)]

    return {split: (rows(f"{split}_source"), rows(f"{split}_target")) for split in SPLITS}


def truncate(rows, max_length, keep_last=False):
    """Rows cut to `max_length` ids (a target keeps its `[end]` when `keep_last`)."""
    cut = []
    for row in rows:
        if len(row) > max_length:
            row = np.concatenate([row[:max_length - 1], row[-1:]]) if keep_last \
                else row[:max_length]
        cut.append(row)
    return cut


def pad(rows, length):
    batch = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    return batch


class PairBatches(keras.utils.PyDataset):
    """Teacher-forcing batches: `({"source", "target": ids[:-1]}, ids[1:], label mask)`.

    `fixed_length` pads every batch to the same size (the tutorial); otherwise
    sentences of similar length are batched together (sorted within windows of 50
    batches, seeded) and each batch is padded to its longest sentence rounded up to
    `multiple`, which removes most padding work from short-sentence corpora.
    """

    def __init__(self, source, target, batch_size, seed=None, fixed_length=None, multiple=4,
                 order=None):
        super().__init__()
        self.source, self.target = source, target
        self.fixed_length, self.multiple = fixed_length, multiple
        self.order = order if order is not None else self._batch_order(batch_size, seed)

    def _batch_order(self, batch_size, seed):
        count = len(self.source)
        indices = np.arange(count) if seed is None else np.random.default_rng(seed).permutation(
            count)
        if self.fixed_length is None:
            window = batch_size * 50
            lengths = np.asarray([len(t) for t in self.target])
            indices = np.concatenate([
                chunk[np.argsort(lengths[chunk], kind="stable")]
                for chunk in np.split(indices, range(window, count, window))])
        batches = [indices[i:i + batch_size] for i in range(0, count, batch_size)]
        if seed is not None:
            np.random.default_rng(seed + 1).shuffle(batches)
        return batches

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        rows = self.order[index]
        source = [self.source[i] for i in rows]
        target = [self.target[i] for i in rows]
        source_length = self.fixed_length or self._rounded(max(map(len, source)))
        target_length = (self.fixed_length + 1) if self.fixed_length \
            else self._rounded(max(map(len, target)) - 1) + 1
        target = pad(target, target_length)
        labels = target[:, 1:]
        return ({"source": pad(source, source_length), "target": target[:, :-1]}, labels,
                (labels != 0).astype("float32"))

    def _rounded(self, length):
        return max(self.multiple, -(-length // self.multiple) * self.multiple)

    def skip(self, count):
        """The same batches without the first `count` (resuming mid-epoch)."""
        return PairBatches(self.source, self.target, None, fixed_length=self.fixed_length,
                           multiple=self.multiple, order=self.order[count:])

    def target_tokens(self):
        return int(sum(len(self.target[i]) - 1 for rows in self.order for i in rows))


def as_tf_dataset(batches):
    """A `tf.data` pipeline over `PairBatches` with dynamic shapes (TensorFlow backend)."""
    import tensorflow as tf

    spec = tf.TensorSpec((None, None), tf.int32)
    signature = ({"source": spec, "target": spec}, spec, tf.TensorSpec((None, None), tf.float32))
    dataset = tf.data.Dataset.from_generator(
        lambda: (batches[i] for i in range(len(batches))), output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)


def for_backend(batches):
    """`PairBatches` as the fastest input for the current Keras backend."""
    return as_tf_dataset(batches) if keras.backend.backend() == "tensorflow" else batches


def references(pairs):
    """(English sentences, [Spanish references]) grouped by English sentence."""
    from data_prep.spa_eng import references_by_source

    grouped = references_by_source(pairs)
    return list(grouped), list(grouped.values())
