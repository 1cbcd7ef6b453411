"""The dense retriever: a Sentence-BERT dual encoder (Reimers and Gurevych, 2019).

Queries and documents are encoded separately by the same BERT-architecture encoder
(the kit's all-MiniLM-L6-v2 by default, as a keras-hub `BertBackbone`): token vectors
are mean-pooled over the real tokens and normalized, so the dot product of two
embeddings is their cosine similarity. Documents are encoded once and kept; a query
costs one short encoding and a matrix product.

Fine-tuning uses the multiple-negatives ranking loss (Henderson et al., 2017): in a
batch of (query, relevant document) pairs, every other query's document, and a hard
negative per query mined from BM25, is a negative; the loss is the cross-entropy of
picking the right document among them from the scaled cosine similarities.

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
from data_prep.text import WordPiece, sentences_of

ENCODER_FOLDER = "encoder"  # a keras-hub preset (config, weights) and its vocab.txt
SMALLEST_LENGTH = 16
ENCODE_SHARD = 8192  # documents encoded between saves: a stop loses at most this many
TOKENIZE_AT_ONCE = 1024
CONSTRUCTION_BREADTH = 128  # candidates kept while building an HNSW graph


# ## The encoder


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
    with XLA). On 2 CPU cores it encoded 1.3-1.7x faster and trained 1.34x faster, with
    the same losses (`benchmarks/encoder_xla.py`), after a longer first compilation."""
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


# ## The index


class ExactIndex:
    """Exact maximum inner product search over unit vectors (cosine similarity)."""

    approximate = False

    def __init__(self, embeddings):
        self.embeddings = np.asarray(embeddings, "float32")

    def search(self, queries, k, chunk_size=256):
        """`(rows, scores)`, each `(len(queries), k)`, best first: a matrix product and
        a partial sort per chunk of queries. (faiss's brute-force `knn` was 8 times
        slower on 100,000 real review embeddings, though faster on random vectors.)"""
        k = min(k, len(self.embeddings))
        queries = np.asarray(queries, "float32")
        rows = np.zeros((len(queries), k), "int64")
        scores = np.zeros((len(queries), k), "float32")
        for start in range(0, len(queries) if k else 0, chunk_size):
            rows[start:start + chunk_size], scores[start:start + chunk_size] = self.top(
                queries[start:start + chunk_size] @ self.embeddings.T, k)
        return rows, scores

    @staticmethod
    def top(similarity, k):
        """`(rows, scores)` of the `k` largest of each row of `similarity`, best first."""
        top = np.argpartition(similarity, -k, axis=1)[:, -k:]
        top_scores = np.take_along_axis(similarity, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        return np.take_along_axis(top, order, axis=1), np.take_along_axis(top_scores, order,
                                                                           axis=1)

    def scores_of(self, queries, rows):
        """Per query, its cosine similarity with its document rows (any number)."""
        return _similarities(self.embeddings, queries, rows)

    def exact(self):
        return self


class ApproximateIndex:
    """Approximate maximum inner product search: an HNSW graph (Malkov and Yashunin,
    2018) built by faiss, each node linked to `degree` neighbours, `breadth` candidates
    kept while searching (more: better recall, slower). faiss was measured against
    usearch (`benchmarks/results/retrieval_index.json`)."""

    approximate = True

    def __init__(self, embeddings, degree=16, breadth=64, graph=None):
        import faiss

        self.embeddings = np.asarray(embeddings, "float32")
        if graph is None:
            graph = faiss.IndexHNSWFlat(self.embeddings.shape[1], degree,
                                        faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = CONSTRUCTION_BREADTH
            graph.add(self.embeddings)
        graph.hnsw.efSearch = breadth
        self.graph = graph

    def search(self, queries, k, breadth=None):
        """`(rows, scores)`, each `(len(queries), k)`, best first (approximately);
        `breadth` candidates kept while searching, when more than the graph's own."""
        import faiss

        k = min(k, len(self.embeddings))
        params = faiss.SearchParametersHNSW(efSearch=max(breadth, self.graph.hnsw.efSearch)) \
            if breadth else None
        scores, rows = self.graph.search(np.ascontiguousarray(queries, "float32"), k,
                                         params=params)
        return np.where(rows >= 0, rows, 0).astype("int64"), scores

    def scores_of(self, queries, rows):
        return _similarities(self.embeddings, queries, rows)

    def exact(self):
        return ExactIndex(self.embeddings)

    def save(self, path):
        import faiss

        faiss.write_index(self.graph, str(path))

    @classmethod
    def load(cls, embeddings, path, breadth=64):
        import faiss

        return cls(embeddings, breadth=breadth, graph=faiss.read_index(str(path)))


class PassageIndex:
    """Documents as overlapping windows of sentences, a document's score its best
    window's (MaxP, Dai and Callan, 2019): a query that matches one passage of a long
    document is not diluted by the rest. `owners[i]`: the document row of window `i`,
    ascending. Searched exactly, `chunk_size` similarities in memory at a time; or,
    given `graph` (an `ApproximateIndex` of the windows), through the nearest
    `WINDOWS_PER_DOCUMENT` times `k` windows it finds (twice as many candidates kept
    while searching), a query whose windows name fewer than `k` documents searched
    exactly."""

    WINDOWS_PER_DOCUMENT = 2  # times the corpus's mean windows per document

    def __init__(self, embeddings, owners, chunk_size=1 << 25, graph=None):
        self.embeddings = np.asarray(embeddings, "float32")
        self.owners = np.asarray(owners, "int64")
        self.starts = np.flatnonzero(np.r_[True, self.owners[1:] != self.owners[:-1]])
        self.ends = np.r_[self.starts[1:], len(self.owners)]  # each document's windows
        self.queries_at_once = max(1, chunk_size // max(1, len(self.embeddings)))
        self.graph = graph
        self.approximate = graph is not None

    def exact(self):
        return PassageIndex(self.embeddings, self.owners) if self.graph else self

    def save(self, path):
        """Its graph of the windows (an approximate index only)."""
        self.graph.save(path)

    def best_windows(self, queries):
        """`(len(queries), documents)`: each document's best window similarity."""
        return np.maximum.reduceat(np.asarray(queries, "float32") @ self.embeddings.T,
                                   self.starts, axis=1)

    def search(self, queries, k):
        """`(rows, scores)`, each `(len(queries), k)`, best first."""
        k = min(k, len(self.starts))
        if self.graph is not None and k and len(queries):
            return self._search_graph(np.asarray(queries, "float32"), k)
        rows = np.zeros((len(queries), k), "int64")
        scores = np.zeros((len(queries), k), "float32")
        for start in range(0, len(queries) if k else 0, self.queries_at_once):
            found, best = ExactIndex.top(self.best_windows(
                queries[start:start + self.queries_at_once]), k)
            rows[start:start + len(found)], scores[start:start + len(found)] = found, best
        return rows, scores

    def _search_graph(self, queries, k):
        """The first `k` documents named by each query's nearest windows (the best
        window of each found first); exact search for a query whose windows name fewer."""
        per_document = -(-len(self.owners) // max(1, len(self.starts)))
        count = min(len(self.owners), k * per_document * self.WINDOWS_PER_DOCUMENT)
        windows, similarities = self.graph.search(queries, count, breadth=2 * count)
        rows = np.zeros((len(queries), k), "int64")
        scores = np.zeros((len(queries), k), "float32")
        short = []
        for number, (found, similarity) in enumerate(zip(windows, similarities,
                                                         strict=True)):
            kept = similarity > np.finfo("float32").min  # faiss's "none found" is the least
            found, similarity = found[kept], similarity[kept]
            documents, first = np.unique(self.owners[found], return_index=True)
            if len(documents) < k:
                short.append(number)
                continue
            best = np.sort(first)[:k]
            rows[number], scores[number] = self.owners[found[best]], similarity[best]
        if short:
            rows[short], scores[short] = self.exact().search(queries[short], k)
        return rows, scores

    def scores_of(self, queries, rows):
        """Per query, its best window similarity in each of its document rows (any
        number per query)."""
        return [self._best_in(np.asarray(query, "float32"), np.asarray(query_rows, "int64"))
                for query, query_rows in zip(queries, rows, strict=True)]

    def _best_in(self, query, rows):
        if not len(rows):
            return np.zeros(0, "float32")
        lengths = self.ends[rows] - self.starts[rows]
        firsts = np.r_[0, np.cumsum(lengths)[:-1]]
        windows = np.arange(lengths.sum()) + np.repeat(self.starts[rows] - firsts, lengths)
        return np.maximum.reduceat(self.embeddings[windows] @ query, firsts)

    def best_window_in(self, queries, rows):
        """The index of each query's best window among the windows of its document row."""
        return [int(self.starts[r] + np.argmax(self._windows_of(r) @ query))
                for query, r in zip(queries, rows, strict=True)]

    def _windows_of(self, row):
        return self.embeddings[self.starts[row]:self.ends[row]]


def _similarities(embeddings, queries, rows):
    return [embeddings[np.asarray(query_rows, "int64")] @ np.asarray(query, "float32")
            for query, query_rows in zip(queries, rows, strict=True)]


def sentence_windows(titles, texts, sentences):
    """`(windows, owners)`: each document as every run of `sentences` consecutive
    sentences of its text (the whole text when it has fewer), its title first."""
    windows, owners = [], []
    for row, (title, text) in enumerate(zip(titles, texts, strict=True)):
        parts = sentences_of(text.strip())
        for start in range(max(1, len(parts) - sentences + 1)):
            windows.append(f"{title} {' '.join(parts[start:start + sentences])}".strip())
            owners.append(row)
    return windows, owners


def index_for(embeddings, exact_limit, owners=None, degree=16, breadth=64, cached_as=None,
              root=None):
    """Exact search up to `exact_limit` documents, an HNSW graph above (with `cached_as`,
    the embeddings' cache settings: built once and cached); with `owners`, the
    embeddings are those documents' windows (a `PassageIndex`)."""
    documents = len(embeddings) if owners is None else len(np.unique(owners))
    graph = None
    if documents > exact_limit:
        graph = ApproximateIndex(embeddings, degree, breadth) if cached_as is None else \
            cached_graph(embeddings, cached_as, degree, breadth, root)
    if owners is not None:
        return PassageIndex(embeddings, owners, graph=graph)
    return graph or ExactIndex(embeddings)


def cached_graph(embeddings, cached_as, degree, breadth, root=None):
    """The HNSW graph of the embeddings cached with settings `cached_as`, built once per
    embeddings and degree and cached in the work folder like them (minutes at scale)."""
    from data_prep import cache

    settings = {"embeddings": cached_as, "degree": degree,
                "construction_breadth": CONSTRUCTION_BREADTH}
    directory = cache.prepared_dir("hnsw", settings, root)
    if not cache.is_intact(directory):
        cache.write_atomically(directory, settings, lambda tmp: ApproximateIndex(
            embeddings, degree, breadth).save(tmp / "index.faiss"))
    return ApproximateIndex.load(embeddings, directory / "index.faiss", breadth)


def recall_against_exact(index, queries, k=10):
    """The share of the exact top `k` an index finds, averaged over `queries`."""
    found = index.search(queries, k)[0]
    exact = index.exact().search(queries, k)[0]
    return float(np.mean([len(set(f) & set(e)) / k for f, e in zip(found, exact,
                                                                     strict=True)]))


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


# ## Fine-tuning: the multiple-negatives ranking loss


class DualEncoderTrainer(keras.Model):
    """Scores each query against every document of its batch (its own relevant one at
    the same row, then the others and the hard negatives): `(batch, documents)` logits,
    the cosine similarities times `scale`. Trained with cross-entropy against one-hot
    targets on the diagonal, this is the multiple-negatives ranking loss; a target may
    also share its mass between a query's document and its hard negative (soft labels).

    With `chunk_size`, a training step is the cached form of that loss (GradCache, Gao
    et al., 2021), so memory no longer grows with the batch: the batch is embedded
    `chunk_size` texts at a time without gradients; the loss's gradient with respect to
    each embedding is computed from those; then each chunk is embedded again and its
    share of the weights' gradient back-propagated, one chunk after the other. The
    gradient is the whole batch's, exactly, provided both passes see the same network:
    so they run without dropout."""

    def __init__(self, encoder_model, scale=20.0, chunk_size=0, **kwargs):
        super().__init__(**kwargs)
        self.encoder, self.scale, self.chunk_size = encoder_model, scale, chunk_size

    def call(self, inputs, training=False):
        queries = self.encoder([inputs["query_ids"], inputs["query_mask"]], training=training)
        documents = self.encoder([inputs["document_ids"], inputs["document_mask"]],
                                 training=training)
        return self.scale * keras.ops.matmul(queries, keras.ops.transpose(documents))

    def train_step(self, *args):
        if not self.chunk_size:
            return super().train_step(*args)
        if keras.backend.backend() == "jax":
            return self._jax_cached_step(*args)
        if keras.backend.backend() == "tensorflow":
            return self._tensorflow_cached_step(*args)
        raise NotImplementedError(f"chunked fine-tuning on {keras.backend.backend()}: "
                                  "use the JAX or TensorFlow backend, or chunk_size 0")

    def _cached_loss(self, embed, inputs, targets):
        """`(logits, loss, chunks)`: the whole batch embedded chunk by chunk without
        gradients, and for each side its chunked `(ids, mask, loss gradient)`."""
        sides = [(inputs["query_ids"], inputs["query_mask"]),
                 (inputs["document_ids"], inputs["document_mask"])]
        chunked = [(_chunks(ids, self.chunk_size), _chunks(mask, self.chunk_size))
                   for ids, mask in sides]
        queries, documents = (keras.ops.stop_gradient(keras.ops.reshape(
            keras.ops.map(lambda chunk: embed(*chunk), side), (-1, self.encoder.output_shape[-1])))
            for side in chunked)
        logits, loss, gradients = multiple_negatives_gradients(queries, documents, self.scale,
                                                               targets)
        return logits, loss, [(*side, _chunks(gradient, self.chunk_size))
                              for side, gradient in zip(chunked, gradients, strict=True)]

    def _jax_cached_step(self, state, data):
        import jax

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)

        def embed(ids, mask, weights=trainable):
            return self.encoder.stateless_call(weights, non_trainable, [ids, mask],
                                               training=False)[0]

        def add_chunk(total, chunk):
            ids, mask, upstream = chunk
            grads = jax.grad(lambda w: keras.ops.sum(embed(ids, mask, w) * upstream))(trainable)
            return jax.tree.map(lambda a, b: a + b, total, grads), None

        logits, loss, chunks = self._cached_loss(embed, inputs, labels)
        grads = jax.tree.map(keras.ops.zeros_like, trainable)
        for side in chunks:  # a scan: one chunk's activations at a time
            grads = jax.lax.scan(add_chunk, grads, side)[0]
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable)
        logs, metrics_variables = self._stateless_metrics(metrics_variables, loss, labels,
                                                          logits)
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)

    def _tensorflow_cached_step(self, data):
        import tensorflow as tf

        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)
        weights = self.trainable_variables

        def embed(ids, mask):
            return self.encoder([ids, mask], training=False)

        def add_chunk(index, total, side):
            ids, mask, upstream = (part[index] for part in side)
            with tf.GradientTape() as tape:
                surrogate = tf.reduce_sum(embed(ids, mask) * upstream)
            grads = tape.gradient(surrogate, [w.value for w in weights],  # tf.Variables
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return index + 1, [a + tf.convert_to_tensor(g)
                               for a, g in zip(total, grads, strict=True)]

        logits, loss, chunks = self._cached_loss(embed, inputs, labels)
        grads = [tf.zeros_like(w) for w in weights]
        for side in chunks:  # one chunk at a time (parallel_iterations=1)
            grads = tf.while_loop(lambda i, _, side=side: i < tf.shape(side[0])[0],
                                  lambda i, total, side=side: add_chunk(i, total, side),
                                  (tf.constant(0), grads), parallel_iterations=1)[1]
        self.optimizer.apply(grads, weights)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(labels, logits)
        return self.get_metrics_result()

    def _stateless_metrics(self, metrics_variables, loss, labels, logits):
        logs, updated = {}, []
        for metric in self.metrics:
            own = metrics_variables[len(updated):len(updated) + len(metric.variables)]
            own = metric.stateless_update_state(own, loss) if metric.name == "loss" \
                else metric.stateless_update_state(own, labels, logits)
            result = metric.stateless_result(own)
            logs.update(result if isinstance(result, dict) else {metric.name: result})
            updated += own
        return logs, updated


def chunk_dividing(batch_size, chunk_size):
    """The largest chunk of at most `chunk_size` rows that divides `batch_size` (0: none)."""
    return next((size for size in range(min(chunk_size, batch_size), 0, -1)
                 if batch_size % size == 0), 0)


def _chunks(tensor, size):
    """`tensor`'s rows as `(rows / size, size, ...)`."""
    return keras.ops.reshape(tensor, (-1, size, *keras.ops.shape(tensor)[1:]))


def multiple_negatives_gradients(queries, documents, scale, targets):
    """`(logits, loss, (d loss / d queries, d loss / d documents))` of the multiple-
    negatives ranking loss (`targets`: each query's distribution over the documents), in
    closed form: the softmax cross-entropy's gradient with respect to the logits is
    `(p - targets) / batch`."""
    logits = scale * keras.ops.matmul(queries, keras.ops.transpose(documents))
    targets = keras.ops.cast(targets, logits.dtype)
    log_p = keras.ops.log_softmax(logits, axis=-1)
    batch = keras.ops.cast(keras.ops.shape(logits)[0], "float32")
    loss = -keras.ops.sum(targets * log_p) / batch
    upstream = (keras.ops.exp(log_p) - targets) * (scale / batch)
    return logits, loss, (keras.ops.matmul(upstream, documents),
                          keras.ops.matmul(keras.ops.transpose(upstream), queries))


def compile_trainer(encoder, learning_rate, scale, chunk_size=0):
    """The trainer of `encoder`, compiled (AdamW; the backbone's pooler, which mean
    pooling does not read, frozen); `chunk_size`: see `DualEncoderTrainer`."""
    encoder.backbone.get_layer("pooled_dense").trainable = False
    trainer = DualEncoderTrainer(encoder.model, scale, chunk_size)
    trainer.compile(optimizer=keras.optimizers.AdamW(learning_rate, weight_decay=0.01),
                    jit_compile=True if xla() else "auto",
                    loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                    metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")])
    return trainer


class PairBatches(keras.utils.PyDataset):
    """One epoch of `(inputs, targets)` batches: `batch_size` (query, relevant document)
    pairs, no document twice in a batch (it would be another query's false negative),
    each query with `negatives[pair]` (hard negatives) after the in-batch documents.
    Seeded by the epoch; `skip` resumes mid-epoch; a short last batch is dropped, so
    every batch has one shape. `sources[row]`: the corpus document a document row is
    made from (a pseudo-query's positive is its document less the query), so that
    document is not another pair's negative in the same batch. A query's target is its
    document, or with `shares` the share `shares[pair]` of it and the rest its negative."""

    def __init__(self, query_ids, document_ids, pairs, negatives, batch_size, query_length,
                 document_length, seed, order=None, sources=None, shares=None):
        super().__init__()
        self.sources = sources or range(len(document_ids))
        self.shares = shares
        self.query_ids, self.document_ids = query_ids, document_ids
        self.pairs, self.negatives = pairs, negatives
        self.batch_size, self.seed = batch_size, seed
        self.query_length, self.document_length = query_length, document_length
        self.order = self._batches() if order is None else order

    def _batches(self):
        """Each pair, in a seeded order, joins the first open batch that holds neither
        its document nor its negative; full batches close, unfilled ones are dropped."""
        rng = np.random.default_rng(self.seed)
        full, open_batches = [], []
        for pair in rng.permutation(len(self.pairs)).tolist():
            documents = {self.sources[self.pairs[pair][1]], self.sources[self.negatives[pair]]}
            batch = next((b for b in open_batches if not documents & b["documents"]), None)
            if batch is None:
                batch = {"pairs": [], "documents": set()}
                open_batches.append(batch)
            batch["pairs"].append(pair)
            batch["documents"] |= documents
            if len(batch["pairs"]) == self.batch_size:
                open_batches.remove(batch)
                full.append(batch["pairs"])
        return full

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        pairs = self.order[index]
        queries = [self.query_ids[self.pairs[p][0]] for p in pairs]
        documents = ([self.document_ids[self.pairs[p][1]] for p in pairs]
                     + [self.document_ids[self.negatives[p]] for p in pairs])
        query_ids, query_mask = pad(queries, self.query_length, len(queries))
        document_ids, document_mask = pad(documents, self.document_length, len(documents))
        inputs = {"query_ids": query_ids, "query_mask": query_mask,
                  "document_ids": document_ids, "document_mask": document_mask}
        return inputs, self._targets(pairs)

    def _targets(self, pairs):
        """`(queries, 2 * queries)`: each query's share of its document (the diagonal)
        and of its hard negative (after the in-batch documents)."""
        count = len(pairs)
        shares = np.array([self.shares[p] for p in pairs] if self.shares else [1.0] * count,
                          "float32")
        targets = np.zeros((count, 2 * count), "float32")
        targets[np.arange(count), np.arange(count)] = shares
        targets[np.arange(count), count + np.arange(count)] = 1.0 - shares
        return targets

    def skip(self, count):
        return PairBatches(self.query_ids, self.document_ids, self.pairs, self.negatives,
                           self.batch_size, self.query_length, self.document_length,
                           self.seed, self.order[count:], self.sources, self.shares)


def hard_negatives(bm25_rows, pairs, judged_rows, depth, seed, corpus_size):
    """For each `(query, document)` pair, a document BM25 ranks in the query's top
    `depth` that is not judged for it (seeded choice); a random unjudged one if none."""
    rng = np.random.default_rng(seed)
    negatives = []
    for query, _ in pairs:
        candidates = [r for r in bm25_rows[query][:depth] if r not in judged_rows[query]]
        if not candidates:  # every BM25 candidate is judged: any other document
            candidates = [r for r in range(corpus_size) if r not in judged_rows[query]] or [0]
        negatives.append(int(candidates[rng.integers(len(candidates))]))
    return negatives
