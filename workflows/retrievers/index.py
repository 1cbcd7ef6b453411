"""Where the dense retriever searches: document (or passage) embeddings in an exact
index, or above a size an HNSW graph (`faiss`), cached with the embeddings it indexes.

Every index answers `search(queries, k) -> (rows, scores)` by cosine similarity (the
embeddings are unit vectors); a passage index scores a document by its best window of
sentences.
"""

import numpy as np

from data_prep.text import sentences_of

CONSTRUCTION_BREADTH = 128  # candidates kept while building an HNSW graph


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


def corpus_index(config, data, encoder, work_dir):
    """The corpus encoded by `encoder` (cached per weights, corpus and length) in an
    index: a vector per document, or per window of `passage_sentences` sentences (the
    graph above `exact_limit` documents cached with them)."""
    from workflows.retrievers import dense

    identity = {"weights": dense.weights_identity(encoder), "corpus": data.fingerprint}
    texts, owners = data.searchable(), None
    if config.passage_sentences:
        texts, owners = sentence_windows(data.titles, data.texts, config.passage_sentences)
        identity["passage_sentences"] = config.passage_sentences
    embeddings = dense.document_embeddings(encoder, texts, identity, config.document_length,
                                           config.encode_batch_size, work_dir)
    cached_as = dense.embeddings_settings(identity, config.document_length)
    return index_for(embeddings, config.exact_limit, owners, cached_as=cached_as,
                     root=work_dir)
