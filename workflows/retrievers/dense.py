"""The dense retriever's encoder: a Sentence-BERT dual encoder (Reimers and Gurevych, 2019).

Queries and documents are encoded separately by the same BERT-architecture encoder
(the kit's all-MiniLM-L6-v2 by default, as a keras-hub `BertBackbone`): token vectors
are mean-pooled over the real tokens and normalized, so the dot product of two
embeddings is their cosine similarity. Documents are encoded once and kept (in shards,
so a stop loses little); a query costs one short encoding and a matrix product
(`index.py`). Fine-tuning is `fine_tuning.py`.

Shapes stay few: texts are tokenized once (BERT's WordPiece, `data_prep.text`),
sorted by length and cut into batches of one fixed size at a few fixed lengths (16, 32,
... up to the maximum), so a compiler sees a handful of programs.
"""

import contextlib
import os
import shutil
from pathlib import Path

import keras
import numpy as np
from tqdm import tqdm

from data_prep import encoders
from data_prep.text import WordPiece

ENCODER_FOLDER = "encoder"  # a keras-hub preset (config, weights) and its vocab.txt
SMALLEST_LENGTH = 16
ENCODE_SHARD = 8192  # documents encoded between saves: a stop loses at most this many
TOKENIZE_AT_ONCE = 1024


class EncoderTokenizer:
    """The encoder's WordPiece (`data_prep.text`): `[CLS] text [SEP]`, cut at
    `max_length` tokens."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.wordpiece = WordPiece(encoders.read_vocabulary(self.folder),
                                   encoders.lowercases(self.folder))
        self.first, self.last = self.wordpiece.ids["[CLS]"], self.wordpiece.ids["[SEP]"]

    def ids(self, texts, max_length):
        """Each text's ids, `TOKENIZE_AT_ONCE` texts at a time: a whole text's tokens
        are held only while its batch is cut (100,000 reviews at once held gigabytes)."""
        texts = list(texts)
        return [np.asarray([self.first, *ids[:max_length - 2], self.last], "int32")
                for start in range(0, len(texts), TOKENIZE_AT_ONCE)
                for ids in self.wordpiece(texts[start:start + TOKENIZE_AT_ONCE])]


def xla():
    """Whether the encoder and its trainer ask TensorFlow for XLA: on any device, where
    Keras's "auto" leaves a CPU without it, unless `NLPKIT_XLA=0` (JAX always compiles
    with XLA): faster on a CPU too, after a longer first compilation
    (`benchmarks/encoder_xla.py` measures it)."""
    return keras.backend.backend() == "tensorflow" and os.environ.get("NLPKIT_XLA") != "0"


def sentence_encoder(backbone):
    """`(token_ids, padding_mask) -> normalized mean of the token vectors`."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input((None,), dtype="bool", name="padding_mask")
    tokens = backbone({"token_ids": token_ids, "padding_mask": padding_mask,
                       "segment_ids": keras.ops.zeros_like(token_ids)})["sequence_output"]
    weights = keras.ops.expand_dims(keras.ops.cast(padding_mask, tokens.dtype), -1)
    mean = keras.ops.sum(tokens * weights, axis=1) / keras.ops.maximum(
        keras.ops.sum(weights, axis=1), 1.0)
    embedding = keras.ops.cast(mean, "float32")
    length = keras.ops.sqrt(keras.ops.sum(embedding * embedding, axis=-1, keepdims=True))
    embedding = embedding / keras.ops.maximum(length, 1e-12)
    return keras.Model([token_ids, padding_mask], embedding, name="sentence_encoder")


class DenseEncoder:
    """A sentence encoder and its tokenizer, saved as one folder."""

    def __init__(self, backbone, folder):
        self.backbone, self.folder = backbone, Path(folder)
        self.tokenizer = EncoderTokenizer(folder)
        self.model = sentence_encoder(backbone)
        if xla():  # its few fixed shapes: one compilation each
            self.model.jit_compile = True

    @classmethod
    def pretrained(cls, name_or_folder, root=None):
        """A known encoder name (fetched once) or a Hugging Face BERT folder."""
        folder = encoders.encoder_folder(name_or_folder, root)
        return cls(encoders.load_backbone(folder), folder)

    @classmethod
    def load(cls, folder):
        """An encoder this module saved (`save`)."""
        import keras_hub

        return cls(keras_hub.models.Backbone.from_preset(str(folder)), folder)

    def save(self, folder):
        folder = Path(folder)
        self.backbone.save_to_preset(str(folder))
        for name in ("vocab.txt", "tokenizer_config.json"):
            if (self.folder / name).is_file():
                shutil.copy(self.folder / name, folder / name)

    def encode(self, texts, max_length, batch_size=32, label=None):
        """`(len(texts), width)` float32 unit vectors, in the order of `texts`; with a
        `label`, progress is shown."""
        ids = self.tokenizer.ids(texts, max_length)
        embeddings = np.zeros((len(texts), self.model.output_shape[-1]), "float32")
        with tqdm(total=len(texts), desc=label, disable=None) if label \
                else contextlib.nullcontext() as progress:
            for rows, token_ids, mask in fixed_shape_batches(ids, max_length, batch_size):
                vectors = self.model.predict_on_batch([token_ids, mask])
                embeddings[rows] = keras.ops.convert_to_numpy(vectors)[:len(rows)]
                if progress:
                    progress.update(len(rows))
        return embeddings


    def warm_up(self, max_length, batch_size=32):
        """Compiles the encoder for every fixed length up to `max_length` (what a served
        model does once), so timings measure searching, not compiling."""
        for length in sorted({bucket_length(n, max_length) for n in range(1, max_length + 1)}):
            token_ids, mask = pad([np.full(length, 1, "int32")], length, batch_size)
            self.model.predict_on_batch([token_ids, mask])


def bucket_length(length, max_length):
    """The fixed length a sequence of `length` tokens is padded to: 16, 32, 64, ...
    (the smallest that holds it), never above `max_length`."""
    bucket = SMALLEST_LENGTH
    while bucket < length:
        bucket *= 2
    return min(bucket, max_length)


def pad(sequences, length, rows):
    """`(token_ids, padding_mask)` of `rows` sequences padded (or cut) to `length`."""
    token_ids = np.zeros((rows, length), "int32")
    for i, sequence in enumerate(sequences):
        token_ids[i, :min(length, len(sequence))] = sequence[:length]
    return token_ids, token_ids != 0


def fixed_shape_batches(ids, max_length, batch_size):
    """`(rows, token_ids, padding_mask)` batches of `batch_size` rows (the last of a
    length topped up with empty rows) at a few fixed lengths, shortest first."""
    order = np.argsort([len(i) for i in ids], kind="stable")
    by_length = {}
    for row in order:
        by_length.setdefault(bucket_length(len(ids[row]), max_length), []).append(row)
    for length, rows in sorted(by_length.items()):
        for start in range(0, len(rows), batch_size):
            chunk = np.asarray(rows[start:start + batch_size])
            yield (chunk, *pad([ids[r] for r in chunk], length, batch_size))


def document_embeddings(encoder, texts, identity, max_length, batch_size, root=None):
    """The embeddings of `texts`, computed once per (encoder weights, corpus, length)
    and cached in the work folder like the other prepared data. They are encoded in
    shards saved as they finish, so a stopped encoding resumes where it stopped."""
    from data_prep import cache

    settings = embeddings_settings(identity, max_length)
    directory = cache.prepared_dir("embeddings", settings, root)
    if not cache.is_intact(directory):
        shards = directory.with_name(directory.name + ".shards")

        def fill(tmp):
            np.save(tmp / "embeddings.npy",
                    encode_in_shards(encoder, texts, max_length, batch_size, shards))
        cache.write_atomically(directory, settings, fill)
        cache.remove(shards)
    return np.load(directory / "embeddings.npy")


def embeddings_settings(identity, max_length):
    """What a cached entry of embeddings is keyed by."""
    return {"encoder": identity, "max_length": max_length, "tokenizer": "data_prep.text"}


def encode_in_shards(encoder, texts, max_length, batch_size, folder):
    """`encoder.encode(texts)`, `ENCODE_SHARD` texts at a time, each shard saved in
    `folder` when done and read back, not encoded again, by a later call (the caller
    holds the cache entry's lock and keys `folder` by what is encoded)."""
    if not texts:
        return encoder.encode(texts, max_length, batch_size)
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    with tqdm(total=len(texts), desc=f"Encoding {len(texts):,} documents",
              disable=None) as progress:
        for start in range(0, len(texts), ENCODE_SHARD):
            shard = texts[start:start + ENCODE_SHARD]
            path = folder / f"{start:012d}-{len(shard)}.npy"
            part = _saved_shard(path, len(shard))
            if part is None:
                part = encoder.encode(shard, max_length, batch_size)
                written = path.with_name(path.stem + ".tmp.npy")
                np.save(written, part)
                written.replace(path)
            parts.append(part)
            progress.update(len(shard))
    return np.concatenate(parts)


def _saved_shard(path, rows):
    """A shard saved by an earlier call, or None (missing, or not `rows` rows)."""
    try:
        part = np.load(path)
    except (OSError, ValueError, EOFError):
        return None
    return part if len(part) == rows else None


def weights_identity(encoder):
    """What identifies an encoder: the SHA-256 of the weights it holds and of its
    vocabulary (the content used, whatever file or name it came from)."""
    import hashlib

    digest = hashlib.sha256((encoder.folder / "vocab.txt").read_bytes())
    for weight in encoder.backbone.weights:
        digest.update(weight.path.encode())
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight.value)).tobytes())
    return digest.hexdigest()
