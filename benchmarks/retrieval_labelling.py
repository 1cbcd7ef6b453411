"""Batch labelling throughput of the retrieval lesson's Beam pipeline, with 1 and 2 local
workers: `results/retrieval_labelling.json`.

Labels `--lines` queries (SciFact's claims, repeated) with the top 10 of a logged
retriever (`--run-id`, default the latest), exactly as `python -m workflows.retrieval
label` does (DirectRunner; `--workers 2` is two processes), and records queries per
second including each worker's start (loading TensorFlow and the retriever).

    MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow.db NLPKIT_WORK_DIR=/work/runs/work \\
        python benchmarks/retrieval_labelling.py --run-id <hybrid run>
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/retrieval_labelling.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--run-id")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--workers", type=int, action="append")
    parser.add_argument("--output", default="benchmarks/results/retrieval_labelling.json")
    args = parser.parse_args(argv)

    from data_prep import retrieval_corpus
    from workflows import retrieval
    from workflows.core import models, runs
    from workflows.retrievers import labelling

    run = runs.check_has_model(runs.model_run(retrieval.LESSON, args.run_id))
    claims = list(retrieval_corpus.prepare(verbose=False).queries.values())
    queries = (claims * (args.lines // len(claims) + 1))[:args.lines]
    rows = []
    with models.verified_model(run) as local, tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "queries.txt"
        path.write_text("".join(f"{query}\n" for query in queries), "utf-8")
        for workers in args.workers or [1, 2]:
            started = time.perf_counter()
            rate = labelling.label(local / "artifacts" / retrieval.EXPORTED,
                                   labelling.QueryFile(path),
                                   Path(scratch) / f"labels-{workers}.jsonl", 10, workers)
            rows.append({"workers": workers, "lines": len(queries),
                         "queries_per_second": rate,
                         "wall_seconds": time.perf_counter() - started})
    write_results({"machine": machine(), "run_id": run.info.run_id,
                   "retriever": run.data.params.get("retriever"), "labelling": rows},
                  args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
