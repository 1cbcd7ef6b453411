"""The retrieval lesson's figures on SciFact, from the MLflow runs of its own commands:
`results/retrieval_scifact.json`.

Every retrieval figure the README shows comes from here: runs built with
`python -m workflows.retrieval train ...` and scored with `... evaluate` (test) on
`../shared/data/scifact.zip`. Per run: the retriever and the settings that distinguish
it, validation and test nDCG@10, recall@100, MRR@10, MAP@100, the rank-weighted hits,
queries per second, index and training times, and the machine it ran on.

    MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow.db python benchmarks/retrieval_scifact.py
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.reporting import write_results  # noqa: E402
from workflows.core.metric_groups import ungrouped  # noqa: E402

SETTINGS = ("k1", "b", "encoder", "encoder_run", "epochs", "batch_size", "learning_rate",
            "depth", "fusion", "document_length", "chunk_size", "pseudo_queries",
            "pseudo_query_count", "max_train_minutes", "negatives_from", "passage_sentences",
            "positives", "answer_share", "answer_temperature")
METRICS = ("ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100",
           "reciprocal_rank_sum_at_5", "queries_per_second")
EXTRA = ("hybrid_weight_used", "index_seconds", "bm25_index_seconds", "train_minutes",
         "trained_epochs", "best_epoch", "best_val_pool_ndcg_at_10")
# the published figures each retriever is held against (BEIR, SciFact test nDCG@10)
ANCHORS = {"bm25": "Lucene/Anserini BM25 0.679 (recall@100 0.913 on this file)",
           "dense": "all-MiniLM-L6-v2 zero-shot 0.645-0.674",
           "fused": "BM25 + MiniLM cross-encoder (BEIR paper) 0.688; BGE-base 0.741"}


def summary(run, params_of):
    """One run's row; `params_of` maps run ids to params (a fused run's encoder is its
    `encoder_run`'s: fine-tuned on judgements, or a cold start)."""
    metrics, tags, params = ungrouped(run.data.metrics), run.data.tags, run.data.params
    tuned = params.get("epochs", "0") not in ("0", "None") or params.get("encoder_run")
    source = params_of.get(params.get("encoder_run"), params).get("pseudo_queries", "none")
    kind = f"cold-start ({source})" if source != "none" else "fine-tuned"
    encoder = (f" + {kind} encoder" if tuned else " + zero-shot encoder") \
        if params.get("retriever") != "bm25" else ""
    if params.get("fusion") in ("rrf", "rescored"):
        encoder += {"rrf": " (RRF)", "rescored": " (rescored)"}[params["fusion"]]
    if params.get("passage_sentences", "0") != "0":
        encoder += f", passages of {params['passage_sentences']} sentences"
    trained = params if params.get("retriever") == "dense" else params_of.get(
        params.get("encoder_run"), {})
    if trained.get("positives") == "passages":
        encoder += ", trained on windows"
    if float(trained.get("answer_share", 1)) < 1:
        encoder += f", the surest {float(trained['answer_share']):.0%} of answers"
    if float(trained.get("answer_temperature", 0)) > 0:
        encoder += f", soft labels at temperature {trained['answer_temperature']}"
    row = {"run_id": run.info.run_id, "retriever": params.get("retriever") + encoder,
           "command": tags.get("command"), "machine": tags.get("accelerator")
           or tags.get("device"), "backend": tags.get("backend"),
           "settings": {name: params[name] for name in SETTINGS if name in params}}
    for split, prefix in (("validation", "val_"), ("test", "test_")):
        found = {name: metrics[prefix + name] for name in METRICS if prefix + name in metrics}
        if found:
            row[split] = found
    row.update({name: metrics[name] for name in EXTRA if name in metrics})
    return row


def chosen_on(row):
    """What picks a retriever's best run: its validation nDCG@10, never the test's (a run
    evaluated with no validation split comes last)."""
    return row.get("validation", {}).get("ndcg_at_10", float("-inf"))


def all_runs():
    import mlflow

    experiment = mlflow.get_experiment_by_name("retrieval")
    if experiment is None:
        return []
    return mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time ASC"])


def evaluated_runs():
    return [run for run in all_runs() if "test_ndcg_at_10" in run.data.metrics]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/retrieval_scifact.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="benchmarks/results/retrieval_scifact.json")
    args = parser.parse_args(argv)
    runs = evaluated_runs()
    params_of = {run.info.run_id: run.data.params for run in all_runs()}
    rows = [summary(run, params_of) for run in runs]
    if not rows:
        print("No evaluated run of the retrieval lesson in this store (MLFLOW_TRACKING_URI); "
              "nothing written.", file=sys.stderr)
        return 2
    best = {}
    for row in rows:
        if row["retriever"] not in best or chosen_on(row) > chosen_on(best[row["retriever"]]):
            best[row["retriever"]] = row
    write_results({"best_by_retriever": {name: {"run_id": row["run_id"][:12], **row["test"]}
                                         for name, row in best.items()},
                   "anchors": ANCHORS, "runs": rows}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
