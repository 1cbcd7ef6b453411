"""Peak memory and step time of fine-tuning the dual encoder, whole batch against the
cached loss (GradCache): `results/dense_memory.json`.

Each setting runs in a fresh process (peak resident memory is per process): the search
lesson's encoder (all-MiniLM-L6-v2) and trainer (`retrievers/dense.py`), one batch of
the lesson's shape (32 queries of 64 tokens, 64 documents of 256), `--steps` training
steps; the first compiles, the others are timed. `chunk_size` 0 is the whole batch at
once (with dropout), 8 the lesson's default.

    python benchmarks/dense_memory.py                      # the current backend
    KERAS_BACKEND=jax python benchmarks/dense_memory.py \\
        --output benchmarks/results/dense_memory_jax.json
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def one_setting(chunk_size, steps, batch, query_length, document_length):
    """Runs in its own process: the figures of one setting, as a dict."""
    import keras
    import numpy as np

    from data_prep import encoders
    from workflows.retrievers import dense, fine_tuning

    encoder = dense.DenseEncoder.pretrained("all-minilm-l6-v2")
    trainer = fine_tuning.compile_trainer(encoder, 2e-5, 20.0, chunk_size)
    rng = np.random.default_rng(0)
    vocabulary = len(encoders.read_vocabulary(encoder.folder))
    inputs = {"query_ids": rng.integers(1000, vocabulary, (batch, query_length)),
              "document_ids": rng.integers(1000, vocabulary, (2 * batch, document_length))}
    inputs = {name: ids.astype("int32") for name, ids in inputs.items()}
    inputs.update(query_mask=inputs["query_ids"] != 0,
                  document_mask=inputs["document_ids"] != 0)
    labels = np.eye(batch, 2 * batch, dtype="float32")  # each query's own document
    seconds, losses = [], []
    for _ in range(steps):
        started = time.perf_counter()
        losses.append(float(trainer.train_on_batch(inputs, labels, return_dict=True)["loss"]))
        seconds.append(time.perf_counter() - started)
    return {"chunk_size": chunk_size, "backend": keras.backend.backend(),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3),
            "first_step_seconds": round(seconds[0], 1),
            "step_seconds": round(sum(seconds[1:]) / max(1, len(seconds) - 1), 1),
            "losses": [round(loss, 5) for loss in losses]}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/dense_memory.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--chunk-sizes", default="0,8")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a setting's own process
    parser.add_argument("--output", default="benchmarks/results/dense_memory.json")
    args = parser.parse_args(argv)
    shape = (args.steps, args.batch, 64, 256)
    if args.one is not None:
        print(json.dumps(one_setting(args.one, *shape)))
        return 0
    rows = []
    for chunk_size in map(int, args.chunk_sizes.split(",")):
        result = subprocess.run([sys.executable, __file__, "--one", str(chunk_size),
                                 "--steps", str(args.steps), "--batch", str(args.batch)],
                                capture_output=True, text=True, cwd=ROOT, check=True)
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    write_results({"machine": machine(), "batch": {"queries": args.batch, "query_tokens": 64,
                                                   "documents": 2 * args.batch,
                                                   "document_tokens": 256},
                   "settings": rows}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
