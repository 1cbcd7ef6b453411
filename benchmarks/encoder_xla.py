"""The retrieval lesson's dual encoder with and without XLA on this machine: queries and
documents encoded per second, a fine-tuning step's time (the cached loss), and how far
the embeddings differ: `results/encoder_xla.json`.

Keras compiles TensorFlow with XLA on a GPU only ("auto"); the lesson asks for it on any
device (`retrievers/dense.XLA`). Each setting runs in its own process on SciFact's claims
(queries, 64 tokens at most) and abstracts (documents, 256), all-MiniLM-L6-v2.

    python benchmarks/encoder_xla.py --beir ../shared/data/scifact.zip
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def scifact_texts(path, documents):
    """SciFact's claims and its first `documents` abstracts (title and text), read by
    the retrieval lesson's own loader."""
    from data_prep import retrieval_corpus

    data = retrieval_corpus.prepare(path, verbose=False)
    return list(data.queries.values()), data.searchable()[:documents]


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def one_setting(xla, beir, documents, batch, steps, embeddings_file):
    """Runs in its own process: the figures of one setting, as a dict."""
    import keras
    import numpy as np

    from workflows.retrievers import dense, fine_tuning

    queries, corpus = scifact_texts(beir, documents)
    encoder = dense.DenseEncoder.pretrained("all-minilm-l6-v2")
    encoder.model.jit_compile = xla
    _, compile_seconds = timed(encoder.warm_up, 256)
    vectors, query_seconds = timed(encoder.encode, queries, 64)
    _, document_seconds = timed(encoder.encode, corpus, 256)
    np.save(embeddings_file, vectors)

    trainer = fine_tuning.compile_trainer(encoder, 2e-5, 20.0, fine_tuning.chunk_dividing(batch, 8))
    trainer.jit_compile = xla
    ids = encoder.tokenizer.ids(queries[:batch] + corpus[:2 * batch], 256)
    query_ids, query_mask = dense.pad(ids[:batch], 64, batch)
    document_ids, document_mask = dense.pad(ids[batch:], 256, 2 * batch)
    inputs = {"query_ids": query_ids, "query_mask": query_mask,
              "document_ids": document_ids, "document_mask": document_mask}
    labels = np.eye(batch, 2 * batch, dtype="float32")  # each query's own document
    seconds, losses = [], []
    for _ in range(steps):
        logs, step_seconds = timed(trainer.train_on_batch, inputs, labels, None, None, True)
        seconds.append(step_seconds)
        losses.append(round(float(logs["loss"]), 5))
    return {"xla": xla, "backend": keras.backend.backend(),
            "compile_seconds": round(compile_seconds, 1),
            "queries_per_second": round(len(queries) / query_seconds, 1),
            "documents_per_second": round(len(corpus) / document_seconds, 2),
            "first_step_seconds": round(seconds[0], 1),
            "step_seconds": round(sum(seconds[1:]) / max(1, len(seconds) - 1), 2),
            "losses": losses}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/encoder_xla.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--beir", required=True, help="scifact.zip")
    parser.add_argument("--documents", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="queries per training step")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--one", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--embeddings", help=argparse.SUPPRESS)
    parser.add_argument("--output", default="benchmarks/results/encoder_xla.json")
    args = parser.parse_args(argv)
    shape = (args.beir, args.documents, args.batch, args.steps)
    if args.one:
        print(json.dumps(one_setting(args.one == "on", *shape, args.embeddings)))
        return 0
    import numpy as np

    rows, embeddings = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for setting in ("off", "on"):
            saved = str(Path(scratch) / f"{setting}.npy")
            result = subprocess.run(
                [sys.executable, __file__, "--one", setting, "--embeddings", saved,
                 "--beir", args.beir, "--documents", str(args.documents),
                 "--batch", str(args.batch), "--steps", str(args.steps)],
                capture_output=True, text=True, cwd=ROOT, check=True)
            rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
            embeddings.append(np.load(saved))
            print(rows[-1], flush=True)
    off, on = rows
    write_results({
        "machine": machine(), "queries": "SciFact's claims", "documents": args.documents,
        "training_batch": {"queries": args.batch, "documents": 2 * args.batch},
        "settings": rows,
        "speedup": {name: round(on[name] / off[name], 2)
                    for name in ("queries_per_second", "documents_per_second")}
        | {"step": round(off["step_seconds"] / on["step_seconds"], 2)},
        "largest_embedding_difference": float(np.abs(embeddings[0] - embeddings[1]).max())},
        args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
