"""Search: BM25, a fine-tuned dual encoder and their hybrids, on real relevance judgements.

    python -m workflows.retrieval prepare                          # SciFact (or your catalogue)
    python -m workflows.retrieval train --retriever bm25           # one MLflow run per retriever
    python -m workflows.retrieval train --retriever dense --epochs 4   # fine-tune the encoder
    python -m workflows.retrieval evaluate                         # test nDCG@10, recall@100, ...
    python -m workflows.retrieval search "vitamin D prevents fractures"
    python -m workflows.retrieval label --file queries.txt --output top10.jsonl --workers 2

A shop's catalogue, a lab's papers or a help desk's answers: a corpus, a stream of
queries, and the question of which retriever to put in production. This lesson
compares the four architectures of a real e-commerce deployment (Okapi BM25; a
Sentence-BERT dual encoder; their intersection; BM25 re-ranked by the dual encoder)
and a hybrid of their scores, fine-tunes the encoder with in-batch and BM25-mined
negatives, and measures all of them with the field's metrics on judged queries. Each
retriever family is one module of `workflows/retrievers/`; this file is the order in
which they are used.
"""

import argparse
import dataclasses
import os
import time
from pathlib import Path

from data_prep import retrieval_corpus
from process.commands import run_main
from workflows.core.cli import LessonCLI
from workflows.core.config import ConfigError
from workflows.core.lesson import Built, DataPlace, Lesson, ModelExport, RunDataset, dataset_digest
from workflows.core.step_inputs import read_texts
from workflows.core.whole_lesson import WholeLesson, add_whole_lesson
from workflows.retrievers import evaluation
from workflows.retrievers.config import (  # noqa: F401  (API)
    CATALOG,
    RETRIEVERS,
    RetrievalConfig,
    fine_tunes,
    reads_bm25,
    reads_encoder,
)
from workflows.retrievers.label_flags import check_k, check_label, dask_address

EXPERIMENT = "retrieval"
PYFUNC_FILE = Path(__file__).parent / "retrievers" / "pyfunc.py"
EXPORTED = "retriever"  # the saved folder, in the run folder and the logged model
# what the logged retriever needs beyond Keras, keras-hub, MLflow and its backend
REQUIREMENTS = ("bm25s", "pystemmer", "tokenizers", "faiss-cpu")


# ## Configuration
# One config for every retriever (`retrievers/config.py`: k1, b, the encoder, the
# fusion, the fine-tuning); a field that does not apply to a retriever is refused.

# ## The data
# A BEIR dataset (SciFact by default) or your catalogue, checked and cached.


def load_data(config, place, verbose=True):
    """The corpus at `place`: a BEIR dataset, or the user's catalogue files of
    `place.options` (`documents`, `queries`, `judgements`, `test_judgements`)."""
    settings = retrieval_corpus.CorpusSettings(config.validation_share, config.seed)
    files = None
    if place.options.get("documents"):
        files = retrieval_corpus.CorpusFiles(*(place.options.get(name) for name in CORPUS_FILES))
    return retrieval_corpus.prepare(place.path, files, settings, place.work_dir, verbose)


CORPUS_FILES = ("documents", "queries", "judgements", "test_judgements")


def corpus_name(place):
    """The corpus's name in the runs table: the catalogue's file, or the BEIR dataset's."""
    return Path(place.options.get("documents") or place.path or os.environ.get(
        retrieval_corpus.SCIFACT.env_var) or "scifact").stem


# ## The retrievers
# `retrievers/bm25.py`, `retrievers/dense.py`, `retrievers/fusion.py`; `searcher.py`
# puts a config's pieces together and saves them as one folder.


def build_bm25(config, data):
    from workflows.retrievers.bm25 import BM25Index

    started = time.perf_counter()
    index = BM25Index.build(data.searchable(), config.k1, config.b, config.stemmer,
                            config.stop_words)
    return index, time.perf_counter() - started


def encoder_identity(config, work_dir):
    """What the encoder a config reads is, checked before any run starts: the content
    digest of the pretrained encoder's folder (another wheel or folder of other weights
    is another run), or the dense run of `encoder_run`; None without an encoder."""
    from data_prep import encoders
    from workflows.core import runs

    if not reads_encoder(config):
        return None
    if not config.encoder_run:
        return "encoder-" + encoders.encoder_digest(
            encoders.encoder_folder(config.encoder, work_dir), work_dir)[:16]
    try:
        run = runs.check_has_model(runs.find_run(EXPERIMENT, config.encoder_run))
    except runs.RunNotFoundError:
        raise ConfigError(f"encoder_run {config.encoder_run!r} matches no run of a model in "
                          f"the experiment {EXPERIMENT!r}: give a dense run's id (compare "
                          "lists them).") from None
    if run.data.params.get("retriever") != "dense":
        raise ConfigError(f"encoder_run {config.encoder_run} is a "
                          f"{run.data.params.get('retriever')} run; give a dense run's id.")
    return f"encoder-run-{run.info.run_id}"


def load_encoder(config, work_dir, folder):
    """The pretrained encoder, or the fine-tuned one of `encoder_run` (copied into the
    run folder: the download is temporary)."""
    from workflows.retrievers.dense import DenseEncoder

    if not config.encoder_run:
        return DenseEncoder.pretrained(config.encoder, work_dir)
    import shutil

    from workflows.core import models, runs

    run = runs.find_run(EXPERIMENT, config.encoder_run)  # checked by `encoder_identity`
    target = folder / "source-encoder"
    with models.verified_model(run) as local:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(local / "artifacts" / EXPORTED / "encoder", target)
    return DenseEncoder.load(target)


def make_searcher(config, data, bm25, encoder, work_dir):
    from workflows.retrievers.index import corpus_index
    from workflows.retrievers.searcher import Searcher, SearchSettings

    index = None if encoder is None else corpus_index(config, data, encoder, work_dir)
    settings = SearchSettings(config.retriever, config.depth, 0.5, config.fusion,
                              config.rrf_k, config.query_length, config.encode_batch_size,
                              config.exact_limit)
    return Searcher(settings, data.doc_ids, data.titles,
                    bm25 if reads_bm25(config) else None, encoder, index=index)


# ## Train: every retriever is a run
# The lesson's hooks: the corpus, the BM25 index, then (`fit`) the encoder, fine-tuned
# through the core's resumable fit when it has epochs (`retrievers/fine_tuning.py`),
# the search index, the hybrid weight and the scores on validation; the export of the
# retriever as one folder. `core/training.py` runs them in that order, in a tracked run.


@dataclasses.dataclass
class RetrieverParts:
    """What a run builds, piece by piece: BM25, the encoder, the searcher over both."""

    bm25: object = None
    encoder: object = None
    searcher: object = None


class RetrievalLesson(Lesson):
    """The lesson's hooks, in the order `core/training.py` runs them."""

    experiment, catalog = EXPERIMENT, CATALOG
    packages = ("retrievers",)
    exported = ("workflows.retrievers.exported", EXPORTED)  # the export step's network
    compare_columns = ("run_id", "params.retriever", "metrics.test_ndcg_at_10",
                       "metrics.test_recall_at_100", "metrics.val_ndcg_at_10",
                       "metrics.test_queries_per_second", "params.encoder_run",
                       "params.epochs", "start_time")
    sort_by = "metrics.test_ndcg_at_10"
    tuning_defaults = {"metric": "val_ndcg_at_10", "direction": "maximize", "pruner": "none"}

    def load_data(self, config, place):
        from workflows.retrievers import pairs

        data = load_data(config, place)
        pairs.check_pairs_can_fill_a_batch(config, data)
        return data

    def data_identity(self, config, data, place):
        """The corpus and the encoder's weights (checked before any run starts)."""
        return ":".join(filter(None, [data.fingerprint,
                                      encoder_identity(config, place.work_dir)]))

    def datasets(self, config, data, place):
        name = corpus_name(place)
        rows = {"corpus": len(data.doc_ids), "training": len(data.split("train")[0]),
                "validation": len(data.split("validation")[0])}
        return [RunDataset(f"{name} {context}", dataset_digest(data.fingerprint, context),
                           str(data.directory), context, count)
                for context, count in rows.items()]

    def build(self, config, data, place):
        parts, metrics = RetrieverParts(), {}
        if reads_bm25(config) or config.epochs:  # (BM25 mines the hard negatives)
            parts.bm25, metrics["bm25_index_seconds"] = build_bm25(config, data)
        tags = retrieval_corpus.data_flags({"beir_path": place.path, **place.options})
        return Built(None, parts, tags=tags, metrics=metrics)

    def fit(self, training, config, data, built):
        from workflows.core import tracking
        from workflows.retrievers import fine_tuning

        parts = built.parts
        if reads_encoder(config):
            parts.encoder = load_encoder(config, training.work_dir, training.folder)
        if config.epochs and fine_tunes(config):
            fine_tuning.fine_tune(training, config, data, parts.encoder, parts.bm25,
                                  training.work_dir)
        started = time.perf_counter()
        parts.searcher = make_searcher(config, data, parts.bm25, parts.encoder, training.work_dir)
        tracking.log_metrics({"index_seconds": time.perf_counter() - started})
        evaluation.log_index_recall(parts.searcher, data)
        weight = evaluation.choose_hybrid_weight(config, data, parts.searcher)
        parts.searcher.settings = dataclasses.replace(parts.searcher.settings,
                                                      hybrid_weight=weight)
        tracking.log_metrics({"hybrid_weight_used": weight})
        validation = evaluation.score(parts.searcher, data, "validation")
        tracking.log_metrics({f"val_{name}": value for name, value in validation.items()})
        if validation:
            print(f"Validation nDCG@10 {validation['ndcg_at_10']:.4f}, recall@100 "
                  f"{validation['recall_at_100']:.4f}")

    def export(self, config, data, built):
        return ModelExport(EXPORTED, built.parts.searcher.save, PYFUNC_FILE,
                           ["vitamin D and bone fractures"], packages=("retrievers",),
                           params={"k": 10}, requirements=REQUIREMENTS)


LESSON = RetrievalLesson()


# ## Use: evaluate, search, label


def load_retriever(args):
    """The run chosen on the command line and its retriever, verified."""
    from workflows.core import models, runs
    from workflows.retrievers.searcher import Searcher

    run = runs.check_has_model(runs.model_run(LESSON, args.run_id, args.model_uri,
                                              _run_filter(args)))
    with models.verified_model(run) as local:
        return run, Searcher.load(local / "artifacts" / EXPORTED)


def evaluate(args):
    """Test metrics of a run (or `--split validation`), logged back to it with a
    per-query table."""
    from workflows.core import runs, tracking

    run, searcher = load_retriever(args)
    config = CATALOG.from_params(run.data.params)
    place = CLI.data_place(args)
    if not (place.path or any(place.options.values())):  # the run's own data
        tags = run.data.tags
        place = DataPlace(tags.get("data_beir_path"), args.work_dir,
                          {name: tags.get(f"data_{name}") for name in CORPUS_FILES})
    data = load_data(config, place)
    if run.data.tags.get("dataset_fingerprint") != data.fingerprint:
        raise ConfigError(f"Run {run.info.run_id[:12]} was built on corpus "
                          f"{run.data.tags.get('dataset_fingerprint')}, not on "
                          f"{data.fingerprint}: give the same data flags as its train step.")
    tracking.log_datasets([RunDataset(
        f"{corpus_name(place)} {args.split}", dataset_digest(data.fingerprint, args.split),
        str(data.directory), args.split, len(data.split(args.split)[0]))], run.info.run_id)
    found = evaluation.score(searcher, data, args.split, per_query=True)
    if not found:
        raise ConfigError(f"The corpus has no {args.split} judgements to evaluate on.")
    results, table, rankings = found
    prefix = "test_" if args.split == "test" else "val_"
    titles = data.title_of()
    rows = [{"query_id": q, "query": data.queries[q], **values,
             "top_3": " | ".join(titles[d][:60] for d in rankings[q][:3])}
            for q, values in table.items()]
    runs.log_evaluation(run.info.run_id, {prefix + k: v for k, v in results.items()},
                        tables={f"{args.split}_per_query.json": _columns(rows)})
    print(f"{config.retriever} on {len(table)} {args.split} queries: " + ", ".join(
        f"{name} {value:.4f}" for name, value in results.items()))
    return results


def search(args):
    """The top `k` documents of each query, with ids, titles and scores."""
    check_k(args.k)
    queries = read_texts(args.texts, args.file, "queries")
    _, searcher = load_retriever(args)
    for query, answers in zip(queries, searcher.answers(queries, args.k), strict=True):
        print(f"\n{query}")
        for answer in answers:
            print(f"  {answer['rank']:>3}. {answer['score']:.4f}  {answer['id']}  "
                  f"{answer['title'][:90]}")


def label(args):
    """Every line of `--file` with its top `k`, written in order to `--output` by an
    Apache Beam pipeline (`retrievers/labelling.py`); resumable."""
    from workflows.core import models, runs
    from workflows.retrievers import labelling

    check_label(args)
    queries = labelling.QueryFile(args.file)
    run = runs.check_has_model(runs.model_run(LESSON, args.run_id, args.model_uri,
                                              _run_filter(args)))
    key = labelling.labelling_key(queries, args.k, run.info.run_id)
    labelling.claim_parts(args.output, key)  # before the retriever loads
    with models.verified_model(run) as local:
        rate = labelling.label(local / "artifacts" / EXPORTED, queries, args.output, args.k,
                               args.workers, args.runner, dask_address(args),
                               run.info.run_id)
    return rate


# ## The command line


def _run_filter(args):
    return {"retriever": args.retriever} if getattr(args, "retriever", None) else None


def with_run(args, run_id, **flags):
    """`args` of `run` as a step of one run's model reads them."""
    return argparse.Namespace(**{**vars(args), "run_id": run_id, "model_uri": None, **flags})


def search_examples(args, run_id, prepared):
    """`run`'s try of a retriever: the top 3 documents of two test queries (or of any
    two queries where the corpus has no test split)."""
    queries = prepared.split("test")[1][:2] or list(prepared.queries.values())[:2]
    if queries:
        search(with_run(args, run_id, texts=queries, file=None, k=3))


def _columns(rows):
    return {key: [row[key] for row in rows] for key in rows[0]} if rows else {}


CLI = LessonCLI(LESSON, "workflows.retrieval", __doc__.split("\n")[0], retrieval_corpus.SCIFACT,
                run_filters=("retriever",), flag_checks={"k": check_k},
                data_options=CORPUS_FILES,
                data_arguments=retrieval_corpus.add_corpus_file_arguments)
CLI.step("prepare", "check and cache the corpus, queries and judgements",
         lambda a: load_data(CATALOG.base("bm25"), CLI.data_place(a)), data=True)
CLI.step("train", "build one retriever (fine-tune a dense one with --epochs) as an MLflow "
         "run", CLI.train, data=True, train="one")
add_whole_lesson(CLI, "prepare, build a retriever (fine-tune a dense one with --epochs), "
                 "evaluate it and search two test queries", WholeLesson(
    prepare=lambda a, configs: load_data(configs[0], CLI.data_place(a)),
    evaluate=lambda a, run_id: evaluate(with_run(a, run_id, split="test")),
    use=lambda a, config, run_id, prepared: search_examples(a, run_id, prepared)))
CLI.step("evaluate", "test metrics of a run (the latest, or --run-id)", evaluate, data=True,
         model=True).add_argument("--split", choices=("test", "validation"), default="test")
CLI.step("search", "the top k documents of each query", search, model=True, texts="queries",
         check=lambda a: read_texts(a.texts, a.file, "queries")).add_argument(
    "-k", type=int, default=10, help="documents per query (default 10)")
_label = CLI.step("label", "label a file of queries with their top k documents (an Apache "
                  "Beam pipeline)", label, model=True, check=check_label)
_label.add_argument("--file", required=True, help="UTF-8 queries, one per line")
_label.add_argument("--output", required=True, help="JSON lines written in input order")
_label.add_argument("-k", type=int, default=10, help="documents per query (default 10)")
_label.add_argument("--workers", type=int, default=1, help="local worker processes")
_label.add_argument("--runner", default="DirectRunner", help="Beam runner: DirectRunner "
                    "(default: --workers local processes), dask (a Dask cluster: "
                    "--dask-address), or Flink or Spark with their options")
_label.add_argument("--dask-address", metavar="ADDRESS", help="with --runner dask: the "
                    "scheduler, e.g. tcp://10.0.0.5:8786 (default: $NLPKIT_DASK_ADDRESS, "
                    "else a cluster on this machine); --file and --output on storage "
                    "every worker reaches")
CLI.shared_steps()
main = CLI.main

if __name__ == "__main__":
    run_main(main)
