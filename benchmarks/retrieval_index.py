"""Which approximate index the retrieval lesson uses above its exact-search limit, chosen by
measurement: `results/retrieval_index.json`.

HNSW graphs from faiss-cpu (`IndexHNSWFlat`, inner product: the lesson's
`ApproximateIndex`) and usearch (`Index`, metric `ip`; `pip install usearch`), with the
same graph degree (M / connectivity 16) and search breadth
(efSearch / expansion_search), against exact search (`ExactIndex`, a matrix product),
on `--documents` unit vectors drawn around `--clusters` centres (embeddings cluster by
topic; uniform random vectors would flatter no index). Per index: build seconds,
queries per second (one query at a time and in batches of 256) and recall@10 against
the exact top 10.

With `--windows N`, each document is `N` windows (the lesson's `passage_sentences`),
each a unit vector near its document's; the lesson's `PassageIndex` is measured
searched exactly and through its faiss graph of the windows, recall@10 counting
documents (each scored by its best window).

    python benchmarks/retrieval_index.py --documents 200000
    python benchmarks/retrieval_index.py --documents 100000 --windows 8 \
        --output benchmarks/results/retrieval_passage_index.json
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402
from workflows.retrievers.index import ApproximateIndex, ExactIndex, index_for  # noqa: E402


def clustered(count, width, clusters, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, width))
    vectors = centres[rng.integers(0, clusters, count)] + 0.6 * rng.normal(size=(count, width))
    vectors = vectors.astype("float32")
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def windows_of(documents, windows, seed):
    """`(embeddings, owners)`: `windows` unit vectors near each of `documents`."""
    rng = np.random.default_rng(seed)
    owners = np.repeat(np.arange(len(documents)), windows)
    vectors = documents[owners] + 0.5 * rng.normal(size=(len(owners), documents.shape[1])
                                                   ).astype("float32") / np.sqrt(
        documents.shape[1])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True), owners


def passage_rows(args, documents, queries):
    """Exact and graph search of the documents' windows, as the lesson's `PassageIndex`."""
    embeddings, owners = windows_of(documents, args.windows, 1)
    exact = index_for(embeddings, len(documents), owners)
    exact_top = exact.search(queries, 10)[0]
    return [measure(f"exact, {len(owners):,} windows", lambda: lambda q, k: exact.search(
                q, k)[0], embeddings, queries, exact_top),
            measure(f"faiss-cpu HNSW of the {len(owners):,} windows",
                    lambda: graph_search(embeddings, owners, args), embeddings, queries,
                    exact_top)]


def graph_search(embeddings, owners, args):
    index = index_for(embeddings, 0, owners, args.degree, args.breadth)
    return lambda queries, k: index.search(queries, k)[0]


def faiss_index(embeddings, degree, breadth):
    index = ApproximateIndex(embeddings, degree, breadth)  # the lesson's (faiss)
    return lambda queries, k: index.search(queries, k)[0]


def usearch_index(embeddings, degree, breadth):
    from usearch.index import Index  # pip install usearch (not in requirements.txt)

    index = Index(ndim=embeddings.shape[1], metric="ip", dtype="f32", connectivity=degree,
                  expansion_add=128, expansion_search=breadth)
    index.add(np.arange(len(embeddings)), embeddings, threads=0)
    return lambda queries, k: np.asarray(index.search(queries, k, threads=0).keys)


def measure(name, build, embeddings, queries, exact_top, k=10):
    started = time.perf_counter()
    search = build()
    built = time.perf_counter() - started
    started = time.perf_counter()
    found = search(queries, k)
    batched = len(queries) / (time.perf_counter() - started)
    started = time.perf_counter()
    for query in queries[:200]:
        search(query[None], k)
    single = 200 / (time.perf_counter() - started)
    recall = np.mean([len(set(f) & set(e)) / k for f, e in zip(found, exact_top, strict=True)])
    row = {"index": name, "build_seconds": built, "queries_per_second_batched": batched,
           "queries_per_second_one_by_one": single, "recall_at_10_vs_exact": float(recall)}
    print(row, flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/retrieval_index.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--degree", type=int, default=16)
    parser.add_argument("--breadth", type=int, default=64)
    parser.add_argument("--windows", type=int, default=1, help="windows per document")
    parser.add_argument("--output", default="benchmarks/results/retrieval_index.json")
    args = parser.parse_args(argv)
    vectors = clustered(args.documents + args.queries, args.width, args.clusters, 0)
    embeddings, queries = vectors[:args.documents], vectors[args.documents:]
    if args.windows > 1:
        rows = passage_rows(args, embeddings, queries)
        settings = {key: value for key, value in vars(args).items() if key != "output"}
        write_results({"machine": machine(), "settings": settings, "indexes": rows},
                      args.output)
        return 0
    exact = ExactIndex(embeddings)
    exact_top = exact.search(queries, 10)[0]
    rows = [measure("exact (numpy matrix product)", lambda: lambda q, k: exact.search(q, k)[0],
                    embeddings, queries, exact_top),
            measure("faiss-cpu HNSW", lambda: faiss_index(embeddings, args.degree,
                                                           args.breadth),
                    embeddings, queries, exact_top),
            measure("usearch HNSW", lambda: usearch_index(embeddings, args.degree,
                                                          args.breadth),
                    embeddings, queries, exact_top)]
    settings = {key: value for key, value in vars(args).items() if key != "output"}
    write_results({"machine": machine(), "settings": settings,
                   "indexes": rows}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
