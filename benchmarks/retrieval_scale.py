"""The retrieval lesson at the deployment's scale: 100,000 IMDB reviews as the corpus and
600,000 known-item queries, through the lesson's own commands:
`results/retrieval_scale.json`.

    python benchmarks/retrieval_scale.py --imdb ../shared/data/aclImdb_v1.tar.gz \\
        --folder /tmp/scale --stages bm25 --workers 2
    python benchmarks/retrieval_scale.py ... --stages dense,hybrid --document-length 64

It builds once, in `--folder` (never in the repository):
- `beir/`: every review of the archive (train, test and unlabelled: 100,000) as
  `corpus.jsonl`, and `--judged` known-item queries with their review as judgement
  (a third train, the rest test) for `evaluate`;
- `queries.txt`: `--queries` known-item queries, one per line, and `answers.txt`, the
  review each was drawn from. A known-item query is a run of 3 to 8 words of one
  sentence of a review drawn at random (short phrases, like the deployment's product
  names); the review it came from is its answer.

Each stage is one lesson command (`prepare`, `train`, `evaluate`, `label`) in a process
of its own: its wall time and peak resident memory (of the command's process, from
`wait4`) are recorded, with throughput where it has one (documents encoded per second,
queries labelled per second) and quality where it is scored (test nDCG@10, and hit@10
and MRR@10 of the labelled file against the known answers, read as a stream). A
stopped benchmark carries on: finished stages are kept in `stages.json`, and the
lesson's own steps resume (a finished `train` is reused, `label` keeps its chunks). A
label stage records the queries its own process labelled and their rate, stopped or not
(`resumed_after_queries`: what an earlier, stopped run of it had written).
"""

import argparse
import contextlib
import json
import os
import random
import re
import resource
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.reporting import machine, write_results  # noqa: E402
from workflows.core.metric_groups import ungrouped  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REVIEW = re.compile(r"aclImdb/(train|test)/(pos|neg|unsup)/(\d+_\d+)\.txt$")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"[A-Za-z0-9'-]+")


def read_reviews(archive):
    """`(id, text)` of every review of the IMDB archive, streamed from the tarball."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            match = REVIEW.match(member.name)
            if match and member.isfile():
                text = tar.extractfile(member).read().decode("utf-8")
                yield "-".join(match.groups()), text.replace("<br />", " ")


def known_item_query(text, rng):
    """A run of 3 to 8 words of one sentence of `text` (None if it has no sentence of
    3 words)."""
    sentences = [words for words in (WORD.findall(s) for s in SENTENCE_END.split(text))
                 if len(words) >= 3]
    if not sentences:
        return None
    words = rng.choice(sentences)
    length = rng.randint(3, min(8, len(words)))
    start = rng.randint(0, len(words) - length)
    return " ".join(words[start:start + length])


def build(archive, folder, documents, queries, judged, seed):
    """Writes the corpus (the first `documents` reviews), the judged queries and the
    query stream, once; returns the number of documents."""
    done = folder / "built.json"
    spec = {"archive": str(archive), "documents": documents, "queries": queries,
            "judged": judged, "seed": seed}
    if done.is_file() and json.loads(done.read_text())["spec"] == spec:
        return json.loads(done.read_text())["corpus"]
    rng = random.Random(seed)
    beir = folder / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    texts = {}
    with open(beir / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for doc_id, text in read_reviews(archive):
            if len(texts) == documents:
                break
            texts[doc_id] = text
            corpus.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    ids = sorted(texts)

    def draw():
        while True:
            doc_id = rng.choice(ids)
            query = known_item_query(texts[doc_id], rng)
            if query:
                return query, doc_id

    with open(beir / "queries.jsonl", "w", encoding="utf-8") as file:
        pairs = [draw() for _ in range(judged)]
        for number, (query, _) in enumerate(pairs):
            file.write(json.dumps({"_id": f"q{number}", "text": query}) + "\n")
    cut = judged // 3
    for split, rows in (("train", range(cut)), ("test", range(cut, judged))):
        (beir / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"q{row}\t{pairs[row][1]}\t1\n" for row in rows))
    with open(folder / "queries.txt", "w", encoding="utf-8") as stream, \
            open(folder / "answers.txt", "w", encoding="utf-8") as answers:
        for _ in range(queries):
            query, doc_id = draw()
            stream.write(query + "\n")
            answers.write(doc_id + "\n")
    done.write_text(json.dumps({"spec": spec, "corpus": len(texts)}))
    return len(texts)


def run_stage(name, command, env, log):
    """Runs one lesson command; `(wall seconds, peak RSS in GB, exit status)`."""
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", flush=True)
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as output:
        process = subprocess.Popen([sys.executable, "-m", "workflows.retrieval", *command],
                                   cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    return {"stage": name, "command": "python -m workflows.retrieval " + " ".join(command),
            "wall_seconds": round(seconds, 1), "peak_rss_gb": round(usage.ru_maxrss / 1e6, 3),
            "exit_status": os.waitstatus_to_exitcode(status)}


def score_labels(labels, answers):
    """hit@10 and MRR@10 of a labelled file against the known answers (streamed)."""
    hits, reciprocal, count = 0, 0.0, 0
    with open(labels, encoding="utf-8") as labelled, open(answers, encoding="utf-8") as known:
        for record, answer in zip(labelled, known, strict=True):
            ranked = [r["id"] for r in json.loads(record)["results"]]
            count += 1
            if answer.strip() in ranked[:10]:
                hits += 1
                reciprocal += 1 / (ranked.index(answer.strip()) + 1)
    return {"hit_at_10": round(hits / count, 4), "mrr_at_10": round(reciprocal / count, 4)}


def latest_metrics(env, retriever):
    """The metrics of the latest run of `retriever` in the benchmark's store."""
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    runs = mlflow.search_runs(experiment_names=["retrieval"], output_format="list",
                              filter_string=f"params.retriever = '{retriever}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return ungrouped(runs[0].data.metrics) if runs else {}


def stages_of(names, args, folder):
    """`(name, command, retriever, what to record)` of each stage, in order."""
    length = ["--set", f"document_length={args.document_length}"]
    label = ["--file", str(folder / "queries.txt"), "--workers", str(args.workers),
             "--runner", args.runner]
    suffix = "" if args.runner == "DirectRunner" else f"-{args.runner}"
    plan = {"bm25": [
        ("prepare", ["prepare"], None, None),
        ("train bm25", ["train", "--retriever", "bm25"], "bm25", "index"),
        ("evaluate bm25", ["evaluate", "--retriever", "bm25"], "bm25", "test"),
        (f"label bm25{suffix}", ["label", "--retriever", "bm25", *label, "--output",
                                 str(folder / f"labels-bm25{suffix}.jsonl")], "bm25",
         "labels")],
        "dense": [
        ("train dense", ["train", "--retriever", "dense", *length], "dense", "index"),
        ("evaluate dense", ["evaluate", "--retriever", "dense"], "dense", "test")],
        "hybrid": [
        ("train hybrid", ["train", "--retriever", "hybrid", *length], "hybrid", "index"),
        ("evaluate hybrid", ["evaluate", "--retriever", "hybrid"], "hybrid", "test"),
        (f"label hybrid{suffix}", ["label", "--retriever", "hybrid", *label, "--output",
                                   str(folder / f"labels-hybrid{suffix}.jsonl")], "hybrid",
         "labels")]}
    return [stage for name in names for stage in plan[name]]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/retrieval_scale.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--imdb", default="../shared/data/aclImdb_v1.tar.gz")
    parser.add_argument("--folder", required=True, help="where the data, store and "
                        "labels go (outside the repository)")
    parser.add_argument("--stages", default="bm25,dense,hybrid")
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=600_000)
    parser.add_argument("--judged", type=int, default=3_000)
    parser.add_argument("--document-length", type=int, default=256)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runner", choices=("DirectRunner", "dask"), default="DirectRunner",
                        help="the label stages' Beam runner (dask: a local cluster of "
                        "--workers worker processes, each one's peak memory recorded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/results/retrieval_scale.json")
    args = parser.parse_args(argv)
    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    documents = build(Path(args.imdb).resolve(), folder, args.documents, args.queries,
                      args.judged, args.seed)
    print(f"Built in {time.perf_counter() - started:.0f} s: {folder}", flush=True)
    env = {**os.environ, "NLPKIT_WORK_DIR": str(folder / "work"),
           "NLPKIT_BEIR_PATH": str(folder / "beir"), "TF_CPP_MIN_LOG_LEVEL": "3",
           "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
    record = folder / "stages.json"
    finished = json.loads(record.read_text()) if record.is_file() else {}
    for name, command, retriever, measure in stages_of(args.stages.split(","), args, folder):
        if finished.get(name, {}).get("exit_status") == 0:
            continue
        output = Path(command[command.index("--output") + 1]) if measure == "labels" else None
        parts = output and output.with_name(output.name + ".parts")
        before = labelled_lines(parts) if measure == "labels" else 0
        with dask_cluster(args, env) as workers_peak:
            result = run_stage(name, command, env, folder / "commands.log")
            result.update(workers_peak())
        if measure == "labels":
            result.update(label_progress(folder, output, parts, before, result))
        elif result["exit_status"] == 0 and measure:
            result.update(measured(measure, retriever, env, folder, documents, result))
        finished[name] = result
        record.write_text(json.dumps(finished, indent=2))
        print(json.dumps(result), flush=True)
    write_results({"machine": machine(), "documents": documents, "queries": args.queries,
                   "judged_test_queries": args.judged - args.judged // 3,
                   "document_length": args.document_length,
                   "stages": list(finished.values())}, args.output)
    return 0


def measured(measure, retriever, env, folder, documents, result):
    """What a stage measured beyond time and memory: index build rate or test metrics."""
    metrics = latest_metrics(env, retriever)
    if measure == "index":
        seconds = metrics.get("index_seconds")
        found = {"index_seconds": seconds,
                 "bm25_index_seconds": metrics.get("bm25_index_seconds")}
        if retriever == "dense" and seconds:  # the hybrid reuses its cached embeddings
            found["documents_per_second"] = round(documents / seconds, 1)
        if retriever == "hybrid":
            found["hybrid_weight_used"] = metrics.get("hybrid_weight_used")
        return found
    return {name: metrics.get(f"test_{name}") for name in (
        "ndcg_at_10", "recall_at_100", "mrr_at_10", "queries_per_second")}


@contextlib.contextmanager
def dask_cluster(args, env):
    """With `--runner dask`: a local cluster of `--workers` worker processes (loopback),
    its address given to the stage's command; yields what reads each worker's peak
    resident memory (GB) after the stage."""
    if args.runner != "dask":
        yield dict
        return
    from distributed import Client, LocalCluster

    env["PYTHONPATH"] = str(ROOT)  # the workers import the kit
    os.environ["PYTHONPATH"] = str(ROOT)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        env["NLPKIT_DASK_ADDRESS"] = cluster.scheduler_address

        def peaks():
            found = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            return {"dask_workers": len(found), "dask_worker_peak_rss_gb": sorted(
                round(kilobytes / 1e6, 3) for kilobytes in found.values())}

        yield peaks


def labelled_lines(parts):
    """Queries a stopped `label` already wrote (its finished chunks), 0 without any."""
    return sum(sum(1 for _ in open(path, encoding="utf-8"))
               for path in parts.glob("[0-9]*.jsonl")) if parts.is_dir() else 0


def label_progress(folder, labels, parts, before, result):
    """A label stage's rate over the queries this process labelled (a resumed stage's
    earlier chunks are not counted in it), and when the file is complete, its quality."""
    complete = result["exit_status"] == 0 and labels.is_file()
    total = sum(1 for _ in open(folder / "answers.txt", encoding="utf-8"))
    done = total if complete else labelled_lines(parts)
    found = {"resumed_after_queries": before, "labelled_queries": done,
             "queries_per_second": round((done - before) / result["wall_seconds"], 1)}
    return {**found, **score_labels(labels, folder / "answers.txt")} if complete else found


if __name__ == "__main__":
    sys.exit(main())
