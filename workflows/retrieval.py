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

import dataclasses
import sys
import time
from pathlib import Path
from typing import NamedTuple

from data_prep import retrieval_corpus
from data_prep.commands import run_main
from workflows.core.cli import LessonCLI, add_search_arguments, overrides_from_args, read_texts
from workflows.core.config import ConfigError, Lesson, ModelExport, describe
from workflows.retrievers import evaluation
from workflows.retrievers.config import (  # noqa: F401  (API)
    CATALOG,
    RETRIEVERS,
    RetrievalConfig,
    fine_tunes,
    reads_bm25,
    reads_encoder,
)

EXPERIMENT = "retrieval"
PYFUNC_FILE = Path(__file__).parent / "retrievers" / "pyfunc.py"
EXPORTED = "retriever"  # the saved folder, in the run folder and the logged model
REQUIREMENTS = ("keras", "keras-hub", "tensorflow", "mlflow", "bm25s", "pystemmer",
                "tokenizers", "faiss-cpu")  # pinned for the logged model


# ## Configuration
# One config for every retriever (`retrievers/config.py`: k1, b, the encoder, the
# fusion, the fine-tuning); a field that does not apply to a retriever is refused.

LESSON = Lesson(EXPERIMENT, CATALOG, train=None, load_data=None,
                compare_columns=("run_id", "params.retriever", "metrics.test_ndcg_at_10",
                                 "metrics.test_recall_at_100", "metrics.val_ndcg_at_10",
                                 "metrics.test_queries_per_second", "params.encoder_run",
                                 "params.epochs", "start_time"),
                sort_by="metrics.test_ndcg_at_10")


# ## The data
# A BEIR dataset (SciFact by default) or your catalogue, checked and cached.


def load_data(config, args, verbose=True):
    settings = retrieval_corpus.CorpusSettings(config.validation_share, config.seed)
    catalogue = None
    if getattr(args, "documents", None):
        catalogue = retrieval_corpus.Catalogue(args.documents, args.queries, args.judgements,
                                               args.test_judgements)
    return retrieval_corpus.prepare(args.beir_path, catalogue, settings, args.work_dir,
                                    verbose)


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


def dense_index(config, data, encoder, work_dir):
    """The corpus encoded by `encoder` (cached per weights, corpus and length) in an
    index: a vector per document, or per window of `passage_sentences` sentences (the
    graph above `exact_limit` documents cached with them)."""
    from workflows.retrievers import dense

    identity = {"weights": dense.weights_identity(encoder), "corpus": data.fingerprint}
    texts, owners = data.searchable(), None
    if config.passage_sentences:
        texts, owners = dense.sentence_windows(data.titles, data.texts, config.passage_sentences)
        identity["passage_sentences"] = config.passage_sentences
    embeddings = dense.document_embeddings(encoder, texts, identity, config.document_length,
                                           config.encode_batch_size, work_dir)
    cached_as = dense.embeddings_settings(identity, config.document_length)
    return dense.index_for(embeddings, config.exact_limit, owners, cached_as=cached_as,
                           root=work_dir)


def make_searcher(config, data, bm25, encoder, work_dir):
    from workflows.retrievers.searcher import Searcher, SearchSettings

    index = None if encoder is None else dense_index(config, data, encoder, work_dir)
    settings = SearchSettings(config.retriever, config.depth, 0.5, config.fusion,
                              config.rrf_k, config.query_length, config.encode_batch_size,
                              config.exact_limit)
    return Searcher(settings, data.doc_ids, data.titles,
                    bm25 if reads_bm25(config) else None, encoder, index=index)


# ## Fine-tuning the dual encoder
# Pairs from the train judgements, a hard negative per pair from BM25, the
# multiple-negatives ranking loss, early stopping on validation nDCG@10, all through
# the core's resumable `fit`.


class TrainingPairs(NamedTuple):
    """What fine-tuning reads: the query texts, `(query, document row)` pairs, each
    query's corpus rows, the document texts, the corpus row of each document text (a
    cold start's positives follow the corpus), pseudo-pairs held out to validate on
    (`(queries, positives, rows)`) when the corpus has no judged validation queries, and
    each pair's rival `(row, lead)` when a teacher answered it (`hybrid_answers`)."""

    query_texts: list
    pairs: list
    judged_rows: list
    documents: list
    sources: list | None = None
    held_out: tuple | None = None
    rivals: list | None = None


def training_pairs(config, data, answer=None):
    """The `TrainingPairs` of the train judgements, or for a cold start with none read:
    each pseudo-query paired with its document's text less the query, or each query
    with the row `answer` (query texts -> rows) gives it."""
    from workflows.retrievers import pseudo_queries

    if config.pseudo_queries != "none":
        held = 0 if data.split("validation")[0] else pseudo_queries.held_out_count(
            config.pseudo_query_count, config.validation_share)
        made = pseudo_queries.pseudo_pairs(
            data, config.pseudo_queries, config.pseudo_query_count + held, config.seed,
            answer, config.answer_share)
        parts = (made.queries, made.positives, made.rows)
        held_out = tuple(part[:held] for part in parts) if held else None
        queries, positives, rows = (part[held:] for part in parts)
        if not queries:
            raise ConfigError(
                "pseudo_queries=hybrid_answers learns from the corpus's queries outside "
                "validation and test; this corpus has none (give --queries, or use titles "
                "or sentences)." if config.pseudo_queries == "hybrid_answers" else
                f"No document gives a pseudo-query from its {config.pseudo_queries}; try "
                "--set pseudo_queries=sentences.")
        corpus = len(data.doc_ids)
        return TrainingPairs(queries, [(q, corpus + q) for q in range(len(queries))],
                             [{r} for r in rows], data.searchable() + positives,
                             list(range(corpus)) + rows, held_out,
                             made.rivals and made.rivals[held:])
    query_ids, query_texts, judged = data.split("train")
    if not query_ids:
        raise ConfigError("Fine-tuning needs train judgements; this corpus has none: "
                          "--set pseudo_queries=titles (or sentences) makes pairs from the "
                          "corpus, --set epochs=0 uses the encoder as it is.")
    row_of = {doc: row for row, doc in enumerate(data.doc_ids)}
    judged_rows = [{row_of[d] for d in judged[q]} for q in query_ids]
    pairs = [(q, row) for q in range(len(query_ids)) for row in sorted(judged_rows[q])]
    return TrainingPairs(query_texts, pairs, judged_rows, data.searchable())


def hybrid_answers(config, data, encoder, bm25, work_dir):
    """Query texts -> `(rows, leads, seconds)`: each one's first row by the hybrid of
    BM25 and `encoder` as it is now (weight 0.5: no judgement chooses it), its fused
    score's lead over the second's, and the second row (-1 if none): the teacher of
    `hybrid_answers`, how sure it is, and its runner-up."""
    from workflows.retrievers.searcher import Searcher, SearchSettings

    settings = SearchSettings("hybrid", query_length=config.query_length,
                              encode_batch_size=config.encode_batch_size)
    searcher = Searcher(settings, data.doc_ids, data.titles, bm25, encoder,
                        index=dense_index(config, data, encoder, work_dir))

    def answer(texts):
        found = searcher.search(texts, k=2)
        return ([ranked[0][0] for ranked in found],
                [ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0.0) for ranked in found],
                [ranked[1][0] if len(ranked) > 1 else -1 for ranked in found])

    return answer


def candidate_rows(config, data, made, encoder, bm25, work_dir):
    """Each training query's top corpus rows, deep enough to hold `negatives_depth`
    unjudged ones: BM25's, or (`negatives_from=encoder`) the encoder's before fine-tuning."""
    depth = config.negatives_depth + max(map(len, made.judged_rows))
    if config.negatives_from == "bm25":
        return bm25.search(made.query_texts, depth)[0]
    index = dense_index(config, data, encoder, work_dir)
    queries = encoder.encode(made.query_texts, config.query_length, config.encode_batch_size,
                             label="Mining negatives")
    return index.search(queries, depth)[0]


def passage_pairs(config, data, encoder, made, negatives, work_dir):
    """`(made, negatives)` with each pair's document and hard negative cut to the window
    of it that `encoder`, before fine-tuning, finds best for the query
    (`positives=passages`): the encoder learns to rank the windows it will search."""
    from workflows.retrievers import dense

    index = dense_index(config, data, encoder, work_dir)
    windows, _ = dense.sentence_windows(data.titles, data.texts, config.passage_sentences)
    vectors = encoder.encode(made.query_texts, config.query_length, config.encode_batch_size)
    sources = made.sources or range(len(made.documents))
    queries = [query for query, _ in made.pairs]
    rows = [sources[document] for _, document in made.pairs] + list(negatives)
    chosen = index.best_window_in(vectors[queries + queries], rows)
    count = len(queries)
    return made._replace(pairs=list(zip(queries, range(count), strict=True)),
                         documents=[windows[window] for window in chosen],
                         sources=rows), list(range(count, 2 * count))


def most_pairs(config, data):
    """The most pairs a fine-tune of `config` can have, known before any is made."""
    if config.pseudo_queries == "hybrid_answers":
        return min(config.pseudo_query_count, len(data.queries_to_learn_from()[0]))
    if config.pseudo_queries != "none":
        return min(config.pseudo_query_count, len(data.doc_ids))
    return sum(map(len, data.split("train")[2].values()))


def check_pairs_can_fill_a_batch(config, data):
    """A batch larger than every pair there could be is refused before any run starts
    (a batch the pairs fill only with a document twice is found once they are made; no
    pair at all, with the reason, when they are made)."""
    if not (config.epochs and fine_tunes(config)):
        return
    most = most_pairs(config, data)
    if 0 < most < config.batch_size:
        raise ConfigError(f"No batch of {config.batch_size} pairs can be made of at most "
                          f"{most:,} pairs: lower --set batch_size.")


def fine_tune(config, data, encoder, bm25, folder, work_dir):
    """Fine-tunes `encoder` in place; returns the training state (history, best epoch)."""
    import mlflow

    from workflows.core import fitting, store
    from workflows.retrievers import dense, pseudo_queries

    made = training_pairs(config, data, hybrid_answers(config, data, encoder, bm25, work_dir)
                          if config.pseudo_queries == "hybrid_answers" else None)
    pairs = made.pairs
    negatives = dense.hard_negatives(candidate_rows(config, data, made, encoder, bm25, work_dir),
                                     pairs, made.judged_rows, config.negatives_depth,
                                     config.seed, len(data.doc_ids))
    shares = None
    if config.answer_temperature:
        negatives, shares = pseudo_queries.soft_targets(negatives, made.rivals,
                                                        config.answer_temperature)
    if config.positives == "passages":
        made, negatives = passage_pairs(config, data, encoder, made, negatives, work_dir)
        pairs = made.pairs
    query_tokens = encoder.tokenizer.ids(made.query_texts, config.query_length)
    document_tokens = encoder.tokenizer.ids(made.documents, config.document_length)

    def epoch_batches(epoch):
        return dense.PairBatches(query_tokens, document_tokens, pairs, negatives,
                                 config.batch_size, config.query_length,
                                 config.document_length, config.seed + epoch,
                                 sources=made.sources, shares=shares)

    first = epoch_batches(0)
    if not len(first):
        raise ConfigError(f"No batch of {config.batch_size} pairs, no document twice in it, "
                          f"can be made of these {len(pairs):,} pairs: lower --set batch_size.")
    trainer = dense.compile_trainer(encoder, config.learning_rate, config.scale,
                                    dense.chunk_dividing(config.batch_size, config.chunk_size))
    # built on one pair of the first batch (a whole batch at once holds a gigabyte), so
    # that a checkpoint can be restored into it
    trainer({name: part[:1] for name, part in first[0][0].items()})
    validate = evaluation.validation_ndcg(config, data, encoder, bm25, made.held_out)
    run_id = mlflow.active_run().info.run_id
    if not mlflow.MlflowClient().get_metric_history(run_id, "val_pool_ndcg_at_10"):
        store.log_epoch(-1, {"val_pool_ndcg_at_10": validate()})  # step 0: before training
    state = fitting.fit_resumably(
        trainer, epoch_batches, None, folder, config.epochs, config.patience,
        config.checkpoint_every_steps, train_examples=len(pairs),
        epoch_metrics=lambda epoch, metrics: metrics.update(val_pool_ndcg_at_10=validate()),
        on_epoch_end=store.log_epoch, verbose=store.progress_verbosity(),
        time_budget_seconds=config.max_train_minutes * 60, started=fitting.started_at(),
        monitor="val_pool_ndcg_at_10", higher_is_better=True)
    best = -state.best_val_loss
    mlflow.log_metrics({"best_epoch": state.best_epoch, "trained_epochs": len(state.history),
                        "train_minutes": state.train_seconds / 60,
                        "best_val_pool_ndcg_at_10": best})
    print(f"Fine-tuned on {len(pairs):,} pairs: best validation-pool nDCG@10 {best:.4f} at "
          f"epoch {state.best_epoch}")
    return state


# ## Train: every retriever is a run


def train(config, args, tags=None):
    """Builds (and for a dense retriever with epochs, fine-tunes) `config`'s retriever,
    scores it on validation, exports and logs it; returns the MLflow run id. A new run
    gets `tags` (a search's trial: its parent run)."""
    import mlflow

    from workflows.core import checkpoints, models, store, training

    data = load_data(config, args)
    encoder_id = encoder_identity(config, args.work_dir)  # before any run: none if refused
    check_pairs_can_fill_a_batch(config, data)
    folder = training.run_folder(LESSON, config, ":".join(filter(None, [data.fingerprint,
                                                                        encoder_id])),
                                 args.work_dir)
    with training.training_lock(folder):
        state = checkpoints.starting_state(folder, args.retrain)
        checkpoints.remove_partial_files(folder)
        if state.run_id:
            training.check_run_is_in_this_store(state.run_id, folder)
        if state.finished:
            print(f"{config.retriever} with this config is already built: run {state.run_id} "
                  f"({folder}). Pass --retrain to build it again.")
            return state.run_id
        print(f"Building {config.retriever}:\n{describe(config)}")
        with store.tracked_run(EXPERIMENT, config.retriever, state.run_id, tags):
            if not state.run_id:
                mlflow.log_params(store.flat_params(config))
                mlflow.set_tags(store.run_tags(data.fingerprint, run_folder=str(folder),
                                               **retrieval_corpus.data_flags(args)))
                mlflow.log_dict(dataclasses.asdict(config), "config.json")
                state.run_id = mlflow.active_run().info.run_id
                checkpoints.TrainingFolder(folder).save_state(state)
            bm25, encoder = None, None
            if reads_bm25(config) or config.epochs:
                bm25, seconds = build_bm25(config, data)
                mlflow.log_metric("bm25_index_seconds", seconds)
            if reads_encoder(config):
                encoder = load_encoder(config, args.work_dir, folder)
            if config.epochs and fine_tunes(config):
                state = fine_tune(config, data, encoder, bm25, folder, args.work_dir)
            started = time.perf_counter()
            searcher = make_searcher(config, data, bm25, encoder, args.work_dir)
            mlflow.log_metric("index_seconds", time.perf_counter() - started)
            evaluation.log_index_recall(searcher, data)
            weight = evaluation.choose_hybrid_weight(config, data, searcher)
            searcher.settings = dataclasses.replace(searcher.settings, hybrid_weight=weight)
            mlflow.log_metric("hybrid_weight_used", weight)
            validation = evaluation.score(searcher, data, "validation")
            mlflow.log_metrics({f"val_{name}": value for name, value in validation.items()})
            if validation:
                print(f"Validation nDCG@10 {validation['ndcg_at_10']:.4f}, recall@100 "
                      f"{validation['recall_at_100']:.4f}")
            models.export_and_log_model(ModelExport(
                EXPORTED, searcher.save, PYFUNC_FILE, ["vitamin D and bone fractures"],
                packages=("retrievers",), params={"k": 10}, requirements=REQUIREMENTS), folder)
            checkpoints.TrainingFolder(folder).mark_finished(state)
    print(f"Run {state.run_id}; the retriever is in {folder / EXPORTED}")
    return state.run_id


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
    from workflows.core import runs

    run, searcher = load_retriever(args)
    config = CATALOG.from_params(run.data.params)
    if not any(getattr(args, name) for name in retrieval_corpus.DATA_FLAGS):  # the run's own data
        for name in retrieval_corpus.DATA_FLAGS:
            setattr(args, name, run.data.tags.get(f"data_{name}"))
    data = load_data(config, args)
    if run.data.tags.get("dataset_fingerprint") != data.fingerprint:
        raise ConfigError(f"Run {run.info.run_id[:12]} was built on corpus "
                          f"{run.data.tags.get('dataset_fingerprint')}, not on "
                          f"{data.fingerprint}: give the same data flags as its train step.")
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


def check_k(k):
    if not 1 <= k <= 1000:
        raise ConfigError(f"-k must be between 1 and 1000, got {k}.")


def check_workers(workers):
    if not 1 <= workers <= 256:
        raise ConfigError(f"--workers must be between 1 and 256, got {workers}.")


def check_label(args):
    """`label`'s flags, before anything loads: `-k`, `--workers`, and an `--output` that
    is neither the queries file nor another file than this labelling's own output."""
    import json

    check_k(args.k)
    check_workers(args.workers)
    queries, output = Path(args.file), Path(args.output)
    if not output.exists():
        return
    if output.is_dir():
        raise ConfigError(f"--output {output} is a folder; give a file path.")
    if queries.exists() and output.samefile(queries):
        raise ConfigError(f"--output {output} is the --file of queries: give another path "
                          "(the queries would be overwritten).")
    try:
        with open(output, encoding="utf-8") as file:
            first = json.loads(file.readline())
        with open(queries, encoding="utf-8") as file:
            query = file.readline().rstrip("\n")
        ours = first.get("line") == 1 and first.get("query") == query and "results" in first
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise ConfigError(f"--output {output} exists and is not an earlier output of this "
                          "labelling: give a new path, or remove that file first.")


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
    with models.verified_model(run) as local:
        rate = labelling.label(local / "artifacts" / EXPORTED, queries, args.output, args.k,
                               args.workers, args.runner)
    return rate


# ## The command line


def _run_filter(args):
    return {"retriever": args.retriever} if getattr(args, "retriever", None) else None


def _columns(rows):
    return {key: [row[key] for row in rows] for key in rows[0]} if rows else {}


class RetrievalCLI(LessonCLI):
    """The lesson's steps; `compare`, `register` and `serve` are the core's."""

    def __init__(self):
        super().__init__(LESSON, "workflows.retrieval", __doc__.split("\n")[0],
                         retrieval_corpus.SCIFACT, run_filters=("retriever",),
                         flag_checks={"k": check_k})
        retrieval_corpus.add_catalogue_arguments(self.step(
            "prepare", "check and cache the corpus, queries and judgements", self.prepare,
            data=True))
        self._add_build_arguments(self.step(
            "train", "build one retriever (fine-tune a dense one with --epochs) as an MLflow "
            "run", self.train, data=True))
        step = self.step("tune", "an Optuna search of validation nDCG@10 over config fields "
                         "(k1, b, hybrid_weight, the fine-tuning settings)", self.tune, data=True)
        self._add_build_arguments(step)
        add_search_arguments(step)
        step = self.step("evaluate", "test metrics of a run (the latest, or --run-id)",
                         evaluate, data=True, model=True)
        retrieval_corpus.add_catalogue_arguments(step)
        step.add_argument("--split", choices=("test", "validation"), default="test")
        step = self.step("search", "the top k documents of each query", search, model=True,
                         texts="queries",
                         check=lambda a: read_texts(a.texts, a.file, "queries"))
        step.add_argument("-k", type=int, default=10, help="documents per query (default 10)")
        step = self.step("label", "label a file of queries with their top k documents (an "
                         "Apache Beam pipeline)", label, model=True, check=check_label)
        step.add_argument("--file", required=True, help="UTF-8 queries, one per line")
        step.add_argument("--output", required=True, help="JSON lines written in input order")
        step.add_argument("-k", type=int, default=10, help="documents per query (default 10)")
        step.add_argument("--workers", type=int, default=1, help="local worker processes")
        step.add_argument("--runner", default="DirectRunner", help="Beam runner (default "
                          "DirectRunner; Dataflow, Flink or Spark with their options)")
        self.shared_steps(search=False)  # compare, register, serve: the core's; tune above

    def _add_build_arguments(self, step):
        retrieval_corpus.add_catalogue_arguments(step)
        step.add_argument("--retriever", default="bm25", help=f"one of: {', '.join(RETRIEVERS)}")
        step.add_argument("--epochs", metavar="N", help="dense: fine-tuning epochs (0: as is)")
        step.add_argument("--retrain", action="store_true",
                          help="build again even if this exact config already finished")
        step.add_argument("--register", metavar="NAME", help="register the retriever")
        step.add_argument("--config", metavar="FILE.yaml",
                          help="YAML mapping of config fields to override")
        step.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                          dest="overrides", help="override one config field (repeatable), "
                          "e.g. --set k1=0.9 --set b=0.4")
        step.set_defaults(model=None)  # the core's `--model`: here `--retriever`

    def tune(self, args):
        """`tune`: an Optuna study of validation nDCG@10 (the core's search), each trial
        one child run of the study's parent run."""
        from workflows.core import runs, search, search_space, store
        from workflows.core.cli import search_block

        config = self.config(args)
        settings = search_space.make_settings(
            config, args.space, search_block(args.config), trials=args.trials,
            metric=args.metric or "val_ndcg_at_10", direction=args.direction or "maximize",
            max_minutes=args.max_minutes, sampler=args.sampler, pruner=args.pruner or "none",
            prune_after_trials=None, workers=args.workers, study=args.study,
            storage=args.storage)
        if args.worker is None:  # prepares the data once, before any worker starts
            load_data(config, args)

        def train_trial(trial_config, parent_run_id, tags, after_epoch):
            return train(trial_config, args, {**store.child_tags(parent_run_id), **tags})

        summary = search.search(LESSON, config, settings, train_trial, args.work_dir,
                                [sys.executable, "-m", self.module, *self.argv], args.worker)
        if summary and summary.get("best_run_id"):
            print(f"Best trial: run {summary['best_run_id'][:12]} (evaluate --run-id it)")
            if args.register:
                runs.register_model(summary["best_run_id"], args.register)

    def check_config(self, args):
        self.config(args)

    def config(self, args):
        if args.retriever not in RETRIEVERS:
            raise ConfigError(f"Unknown --retriever {args.retriever!r}; use one of: "
                              f"{', '.join(RETRIEVERS)}.")
        overrides = overrides_from_args(args)
        if getattr(args, "epochs", None) is not None:
            overrides["epochs"] = args.epochs
        if overrides.get("distribution", "none") != "none":
            raise ConfigError("The search lesson fine-tunes on one device: its negatives are "
                              "the whole batch's, and the cached loss (chunk_size) grows the "
                              "batch within one device's memory; leave distribution out.")
        return CATALOG.make(args.retriever, None, overrides)

    def prepare(self, args):
        load_data(RetrievalConfig(), args)

    def train(self, args):
        run_id = train(self.config(args), args)
        if args.register:
            from workflows.core import runs

            runs.register_model(run_id, args.register)
        return run_id


def main(argv=None):
    return RetrievalCLI().main(argv)


if __name__ == "__main__":
    run_main(lambda argv=None: main(sys.argv[1:]))
