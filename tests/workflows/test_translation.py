"""The translation lesson on a tiny generated corpus: its decoding, metrics and refusals
here, the lesson end to end (`translation_store`) in the integration tier."""

import json
import subprocess
import sys
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest

from benchmarks import translation_decoding
from data_prep.pair_tokens import normalize, tidy
from data_prep.text import PAD_ID, BucketPlan
from tests.data_prep.fixtures import generated_spa_lines, write_spa_eng_zip
from tests.workflows.serving import post, served
from workflows import translation as workflow
from workflows.core import runs as core_runs
from workflows.core import servers
from workflows.core.metric_groups import ungrouped
from workflows.seq2seq.metrics import bleu_scores
from workflows.seq2seq.translator import (
    NEG_INF,
    Decoder,
    PairBatches,
    length_penalty,
    rank_hypotheses,
)
from workflows.translation import build_model

# float32: an untrained model's logits nearly tie, and bfloat16 breaks ties differently
# in cached and uncached decoding, by CPU (`test_decoding_benchmark_matches_...`). One
# layer each side: a third less to compile; stacked layers are `tiny_config`'s (two).
TINY_TRANSFORMER = ["--epochs", "2", "--set", "embed_dim=16", "--set", "dense_dim=32",
                    "--set", "num_heads=2", "--set", "encoder_layers=1",
                    "--set", "decoder_layers=1", "--set", "batch_tokens=256",
                    "--set", "bleu_sentences=8", "--set", "dtype_policy=float32",
                    "--average-epochs", "2"]
TINY_GRU = ["--epochs", "2", "--set", "embed_dim=8", "--set", "latent_dim=16",
            "--set", "batch_size=16", "--set", "bleu_sentences=8"]


@pytest.fixture(scope="module")
def translation_folders(tmp_path_factory, new_store):
    """The toy pairs, a work folder and a new store, nothing trained: what the refusals
    need."""
    root = tmp_path_factory.mktemp("translation_workflow")
    archive = write_spa_eng_zip(root / "spa-eng.zip", generated_spa_lines())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NLPKIT_WORK_DIR", str(root / "work"))
        patch.setenv("NLPKIT_SPA_ENG_PATH", str(archive))
        patch.setenv("MLFLOW_TRACKING_URI", new_store(root / "mlflow" / "mlflow.db"))
        yield root


@pytest.fixture(scope="module")
def translation_store(translation_folders):
    """The lesson run end to end with a tiny Transformer (the integration tier)."""
    assert workflow.main(["run", "--preset", "cpu", *TINY_TRANSFORMER]) == 0
    return translation_folders


@pytest.fixture(scope="module")
def gru_run(translation_store):
    """The GRU translator (word tokens, attention) run end to end in the same store: a
    second model, for the integration tier."""
    assert workflow.main(["run", "--model", "gru_seq2seq", "--attention", *TINY_GRU]) == 0
    return runs()["gru_seq2seq"]


def runs(direction="en-es"):
    import mlflow

    from workflows.core import store as mlflow_store

    experiment = mlflow_store.use_experiment(workflow.EXPERIMENT)
    return {run.data.params["model"]: run for run in mlflow.search_runs(
        [experiment.experiment_id], output_format="list")
        if run.data.params["direction"] == direction}



def test_every_model_has_a_family_module_that_builds_it():
    import importlib

    assert set(workflow.FAMILIES) == set(workflow.CATALOG.models)
    for model, name in workflow.FAMILIES.items():
        family = importlib.import_module(f"workflows.seq2seq.{name}")
        tiny = {"embed_dim": 8, "dense_dim": 8, "num_heads": 2} if model == "transformer" \
            else {"embed_dim": 8, "latent_dim": 8}
        config = workflow.make_config(model, None, tiny)
        assert family.build(config, 30, 40).count_params() > 0

def check_run_is_logged(run):
    """Two epochs of validation BLEU, the test metrics and the artifacts of a `run`."""
    import mlflow

    client = mlflow.MlflowClient()
    history = client.get_metric_history(run.info.run_id, "val_normalized_bleu")
    assert [m.step for m in history] == [1, 2]
    metrics = ungrouped(run.data.metrics)  # (the timings: under system/)
    for name in ("test_greedy_bleu", "test_beam4_normalized_bleu", "test_beam4_chrf",
                 "test_masked_accuracy", "test_greedy_ms_per_sentence",
                 "mean_target_tokens_per_second", "train_minutes"):
        assert name in metrics, name
    assert 0.0 < metrics["test_masked_accuracy"] <= 1.0  # the toy pairs are learnable
    assert metrics["test_beam4_bleu"] >= 0 and metrics["train_minutes"] > 0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "learning_curves.png", "sample_translations.json",
            "attention.png", "test_metrics.json", "vocabulary"} <= artifacts
    return artifacts


@pytest.mark.integration
def test_run_logs_params_metrics_and_artifacts(translation_store):
    (transformer,) = runs().values()
    assert transformer.data.params["preset"] == "cpu"
    assert transformer.data.params["tokenization"] == "wordpiece"
    assert "lr_schedule.png" in check_run_is_logged(transformer)
    # checkpoint averaging of the last 2 epochs: measured, and the winner named
    assert {"averaged_val_loss", "averaged_val_bleu"} <= set(transformer.data.metrics)
    assert transformer.data.tags["exported_weights"] in (
        "average of epochs 1-2", f"best epoch {int(transformer.data.metrics['best_epoch'])}")
    assert transformer.data.tags["dtype_policy_used"] == transformer.data.params["dtype_policy"]


@pytest.mark.integration
def test_exported_translator_round_trips_strings_in_a_fresh_process(translation_store, tmp_path):
    run_id = runs()["transformer"].info.run_id
    script = f"""
import mlflow
model = mlflow.pyfunc.load_model("runs:/{run_id}/model")
out = model.predict(["How are you?", "", "   ", "The dog is big. " * 40, "Zyxwv qqq!"])
assert isinstance(out, list) and len(out) == 5, out
assert all(isinstance(text, str) for text in out), out
assert out[1] == "" and out[2] == "", out
greedy = model.predict(["How are you?"], params={{"beam_width": 1}})
assert len(greedy) == 1 and isinstance(greedy[0], str)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.integration
def test_translate_and_compare_from_the_command_line(translation_store, capsys):
    assert workflow.main(["translate", "How are you?", "I see the dog."]) == 0
    assert capsys.readouterr().out.count("  -> ") == 2
    assert workflow.main(["compare", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("run_id,direction,model,preset") and len(lines) == 2


@pytest.mark.integration
def test_decoding_benchmark_matches_the_tutorial_loop(translation_store, tmp_path):
    run_id = runs()["transformer"].info.run_id
    output = tmp_path / "decoding.json"
    translation_decoding.main(["--run-id", run_id, "--sentences", "6", "--batch-size", "4",
                               "--output", str(output)])  # in this process: no second start
    figures = json.loads(output.read_text())
    assert figures["sentences"] == 6 and figures["run_id"] == run_id
    assert all(ms > 0 for ms in figures["ms_per_sentence"].values())
    assert set(figures["ms_per_sentence"]) == {
        "tutorial_loop", "tutorial_loop_compiled", "cached_one_by_one", "cached_batched"}
    assert figures["same_output_as_tutorial_loop"] == {
        "tutorial_loop_compiled": 6, "cached_one_by_one": 6, "cached_batched": 6}


@pytest.mark.integration
def test_the_gru_translator_runs_end_to_end_and_registers(gru_run, capsys):
    assert gru_run.data.params["tokenization"] == "word"
    assert gru_run.data.params["attention"] == "True"
    check_run_is_logged(gru_run)
    run_id = gru_run.info.run_id
    assert workflow.main(["register", "spa-test", "--run-id", run_id[:12]]) == 0
    assert "models:/spa-test/1" in capsys.readouterr().out
    assert workflow.main(["translate", "--model-uri", "models:/spa-test/1", "Hi."]) == 0
    output = capsys.readouterr().out
    assert run_id in output and output.count("  -> ") == 1


@pytest.mark.integration
def test_rerun_of_a_finished_config_reuses_it(translation_store, capsys):
    def run_ids():
        import mlflow

        return sorted(run.info.run_id for run in mlflow.search_runs(
            experiment_names=[workflow.EXPERIMENT], output_format="list"))

    before = run_ids()
    assert workflow.main(["train", "--preset", "cpu", *TINY_TRANSFORMER]) == 0
    assert "already trained" in capsys.readouterr().out
    assert run_ids() == before  # no run added


def test_bad_input_gives_clear_errors(translation_folders, capsys):
    assert workflow.main(["train", "--model", "lstm"]) == 2
    assert "valid models: transformer, gru_seq2seq" in capsys.readouterr().err
    assert workflow.main(["train", "--preset", "tpu"]) == 2
    assert "valid presets: tutorial, cpu, gpu" in capsys.readouterr().err
    assert workflow.main(["train", "--set", "tokenization=chars"]) == 2
    assert "tokenization must be one of word, wordpiece" in capsys.readouterr().err
    assert workflow.main(["translate", "--run-id", "nope", "Hi."]) == 2
    assert "No run matches --run-id 'nope'" in capsys.readouterr().err
    assert workflow.main(["translate"]) == 2
    with pytest.raises(TypeError, match="must be strings"):
        workflow.translate(["Hi.", 3])


@pytest.mark.integration
@pytest.mark.parametrize("format", ["onnx", "saved_model", "litert"])
@pytest.mark.parametrize("model", ["transformer", "gru_seq2seq"])
def test_a_translator_exports_and_decodes_greedily_as_the_kit_does(
        translation_store, gru_run, model, format, capsys):
    from tests.test_docs import doc_blocks
    from workflows.core import export, models
    from workflows.seq2seq.exported import EXAMPLE_SENTENCE
    from workflows.seq2seq.translator import Translator

    run = runs()[model]
    step = ["export", "--run-id", run.info.run_id, "--format", format]
    if format == "litert" and model == "gru_seq2seq":
        assert workflow.main(step) == 2  # a recurrent loop LiteRT's interpreter lacks
        assert "runtime cannot run this model" in capsys.readouterr().err
        return
    assert workflow.main(step) == 0
    folder = translation_store / "work" / "exports" / run.info.run_id / format
    with models.verified_model(run) as local:
        translator = Translator.load(local / "artifacts" / "translator")
    sources, targets = translator.model.source_vocabulary_size, \
        translator.model.target_vocabulary_size
    rng = np.random.default_rng(0)
    arrays = {"source": rng.integers(1, sources, (100, 9)).astype("int32"),
              "target": rng.integers(1, targets, (100, 7)).astype("int32")}
    arrays["source"][::3, 5:] = PAD_ID  # padded sentences too
    expected = keras.ops.convert_to_numpy(translator.model(arrays, training=False))
    answer, names = export.load_export(folder)
    assert np.abs(answer(export.named_arrays(arrays, names)) - expected).max() <= 1e-4
    if format == "onnx":  # the docs' greedy loop, run in the export's folder
        (block,) = doc_blocks("docs/export.md", "max_output_length")
        ids = json.loads(subprocess.run([sys.executable, "-c", block], cwd=folder, text=True,
                                        capture_output=True, check=True).stdout)
        assert translator.tokenizer.detokenize([ids]) == translator.translate(
            [EXAMPLE_SENTENCE], beam_width=1)


@pytest.mark.integration
def test_a_translator_served_through_its_export_answers_as_its_greedy_decoding(
        translation_store, tmp_path):
    from workflows.core import models
    from workflows.seq2seq.translator import Translator

    run = runs()["transformer"]
    assert workflow.main(["export", "--run-id", run.info.run_id, "--format", "onnx"]) == 0
    asked = ["How are you?", "", "I love reading books.", "Where is the station?"]
    with models.verified_model(run) as local:
        translator = Translator.load(local / "artifacts" / "translator")
    with served(models.model_uri(run.info.run_id), tmp_path / "server.log",
                flags=["--export", "onnx"]) as url:
        status, body = post(url, json.dumps({"inputs": asked}).encode())
        assert status == 200, body
        assert body["predictions"] == translator.translate(asked, beam_width=1)
        assert body["predictions"][1] == ""
        status, body = post(url, json.dumps({"inputs": asked[:1],
                                             "params": {"beam_width": 4}}).encode())
        assert status == 400 and "decodes greedily" in json.dumps(body)


def test_the_exports_greedy_loop_decodes_as_the_kits_cached_greedy_decoding():
    """`exported.greedy_ids`, run on the Keras network itself (any runtime answers the
    same) on padded sources: the tokens of the kit's cached greedy decoding, row by row."""
    from workflows.seq2seq import exported

    keras.utils.set_random_seed(7)
    model = build_model(tiny_config(), 40, 50)
    source = np.random.default_rng(2).integers(1, 40, (5, 9)).astype("int32")
    source[1, 4:] = source[3, 6:] = PAD_ID
    cached = keras.ops.convert_to_numpy(Decoder(model, 2, 3).generate(source, 8))
    settings = {"start_id": 2, "end_id": 3, "never_ids": [PAD_ID, 2], "max_output_length": 8}
    rows = exported.greedy_ids(
        lambda arrays: keras.ops.convert_to_numpy(model(arrays, training=False)),
        ["source", "target"], settings, source)
    padded = [np.pad(row, (0, 8 - len(row))) for row in rows]
    assert (np.stack(padded) == cached).all()


def tiny_config(**changes):
    return workflow.make_config("transformer", "cpu", {
        "embed_dim": 16, "dense_dim": 32, "num_heads": 2, "sequence_length": 12,
        "dtype_policy": "float32", **changes})


def uncached_greedy(model, source, start_id, end_id, max_length):
    """The tutorial's decoding loop: re-runs the whole model for every new token."""
    source = np.asarray(source, "int32")
    tokens = np.zeros((len(source), max_length), "int32")
    tokens[:, 0] = start_id
    for index in range(1, max_length):
        logits = model({"source": source, "target": tokens[:, :index]}, training=False)
        logits = keras.ops.convert_to_numpy(logits)[:, -1, :]
        logits[:, [PAD_ID, start_id]] = NEG_INF  # as `Decoder`: never padding or [start]
        tokens[:, index] = np.argmax(logits, axis=-1)
        if (tokens[:, :index + 1] == end_id).any(axis=1).all():
            break
    return keras.ops.convert_to_numpy(Decoder(model, start_id, end_id).pad_after_end(tokens))


@pytest.mark.parametrize("model", ["transformer", "gru_seq2seq"])
def test_cached_decoding_equals_uncached_decoding(model):
    keras.utils.set_random_seed(3)
    overrides = {"embed_dim": 16, "dense_dim": 32, "num_heads": 2, "latent_dim": 16,
                 "sequence_length": 12, "dtype_policy": "float32"}
    config = workflow.make_config(model, "cpu", workflow.CATALOG.applicable_overrides(
        model, "cpu", overrides))
    translator = build_model(config, 40, 50)
    source = np.random.default_rng(0).integers(1, 40, (5, 9)).astype("int32")
    source[1, 4:] = 0  # padding in one sentence
    cached = keras.ops.convert_to_numpy(Decoder(translator, 2, 3).generate(source, 8))
    assert (cached == uncached_greedy(translator, source, 2, 3, 8)).all()


def test_beam_search_with_width_one_equals_greedy():
    keras.utils.set_random_seed(5)
    model = build_model(tiny_config(), 40, 50)
    source = np.random.default_rng(1).integers(1, 40, (6, 7)).astype("int32")
    decoder = Decoder(model, 2, 3)
    greedy = keras.ops.convert_to_numpy(decoder.generate(source, 6))
    beam = keras.ops.convert_to_numpy(
        decoder.sample(keras_hub.samplers.BeamSampler(num_beams=1), source, 6))
    assert (greedy == beam).all()
    wide = keras.ops.convert_to_numpy(decoder.generate(source, 6, beam_width=3))
    assert wide.shape == greedy.shape and (wide[:, 0] == 2).all()


def test_a_length_penalty_reranks_beams_as_wu_et_al_write_it():
    short = [2, 7, 3, 0, 0, 0, 0, 0]  # 2 tokens generated, the end included
    long = [2, 7, 8, 9, 10, 11, 3, 0]  # 6 tokens
    tokens, log_probs = np.array([[short, long, short]]), np.array([[-2.0, -2.2, -3.0]])
    (plain,) = rank_hypotheses(tokens, log_probs, alpha=0.0)
    assert [list(ids) for ids, _ in plain] == [short, long]  # the duplicate beam is dropped
    assert [score for _, score in plain] == [-2.0, -2.2]
    (penalized,) = rank_hypotheses(tokens, log_probs, alpha=1.0)
    assert [list(ids) for ids, _ in penalized] == [long, short]
    assert penalized[0][1] == pytest.approx(-2.2 / (11 / 6))
    assert penalized[1][1] == pytest.approx(-2.0 / (7 / 6))
    assert length_penalty([0, 1], 0.6) == pytest.approx([(5 / 6) ** 0.6, 1.0])
    (unfilled,) = rank_hypotheses(tokens, np.array([[-2.0, 2 * NEG_INF, -3.0]]))
    assert len(unfilled) == 1


def test_n_best_gives_distinct_beams_in_score_order_led_by_beam_search():
    keras.utils.set_random_seed(5)
    model = build_model(tiny_config(), 40, 50)
    source = np.random.default_rng(1).integers(1, 40, (4, 7)).astype("int32")
    decoder = Decoder(model, 2, 3)
    tokens, log_probs = decoder.generate_all_beams(source, 7, beam_width=4)
    tokens, log_probs = keras.ops.convert_to_numpy(tokens), keras.ops.convert_to_numpy(log_probs)
    best = keras.ops.convert_to_numpy(decoder.generate(source, 7, beam_width=4))
    for row, hypotheses in enumerate(rank_hypotheses(tokens, log_probs)):
        assert len(hypotheses) == 4 and len({ids.tobytes() for ids, _ in hypotheses}) == 4
        scores = [score for _, score in hypotheses]
        assert scores == sorted(scores, reverse=True) and max(scores) <= 0
        assert (hypotheses[0][0] == best[row]).all()


@pytest.mark.integration
def test_translate_prints_n_best_with_scores(translation_store, capsys):
    assert workflow.main(["translate", "I see the dog.", "--n-best", "3",
                          "--length-penalty", "0.6"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    scores = [float(line.split()[0]) for line in lines[lines.index("I see the dog.") + 1:]]
    assert 1 <= len(scores) <= 3
    assert scores == sorted(scores, reverse=True)
    assert workflow.main(["translate", "Hi.", "--n-best", "0"]) == 2
    capsys.readouterr()
    assert workflow.main(["evaluate", "--limit", "8", "--length-penalty", "0.6"]) == 0
    output = capsys.readouterr().out
    assert "beam4_lp0.6: BLEU" in output and '"test_beam4_lp0.6_normalized_bleu"' in output
    assert workflow.main(["translate", "Hi.", "--length-penalty", "-1"]) == 2


@pytest.mark.integration
def test_score_is_the_log_likelihood_that_the_training_loss_averages(translation_store,
                                                                      capsys):
    from layers import MaskedCrossentropy

    run, translator = workflow.load_run_translator(runs()["transformer"].info.run_id)
    data = workflow.load_data(core_runs.config_of(workflow.LESSON, run))
    pairs = data.prepared.pairs("test")[:12]
    scores = translator.score([s for s, _ in pairs], [t for _, t in pairs])
    tokenizer = translator.tokenizer
    target = tokenizer.target_ids([t for _, t in pairs])
    assert [tokens for _, tokens in scores] == [len(row) - 1 for row in target]
    inputs, labels, _ = PairBatches(tokenizer.source_ids([s for s, _ in pairs]), target,
                                    BucketPlan.single(40, len(pairs)))[0]
    loss = float(MaskedCrossentropy()(labels, translator.model(inputs, training=False)))
    mean = -sum(total for total, _ in scores) / sum(tokens for _, tokens in scores)
    assert mean == pytest.approx(loss, rel=1e-4)
    assert workflow.main(["score", "How are you? ||| ¿Cómo estás?",
                          "How are you? ||| El gato come pan rojo."]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    header = lines.index("log_likelihood\ttokens\tper_token\tsource\ttarget")
    assert lines[-1].startswith("# 2 pair(s)")
    assert [float(line.split("\t")[0]) < 0 for line in lines[header + 1:-1]] == [True, True]
    assert workflow.main(["score", "How are you?"]) == 2
    assert "Pair 1: 'How are you?' is not" in capsys.readouterr().err


def test_decoded_rows_stop_at_end_and_never_emit_padding_or_start():
    keras.utils.set_random_seed(7)
    model = build_model(tiny_config(), 40, 50)
    source = np.random.default_rng(2).integers(1, 40, (8, 6)).astype("int32")
    for width in (1, 3):
        rows = keras.ops.convert_to_numpy(Decoder(model, 2, 3).generate(source, 12, width))
        for row in rows:
            generated = list(row[1:])
            end = generated.index(3) if 3 in generated else len(generated)
            assert 0 not in generated[:end] and 2 not in generated
            assert all(token == 0 for token in generated[end + 1:])


def test_bleu_of_a_perfect_hypothesis_is_100_with_any_reference():
    references = [["¿Cómo estás?", "¿Qué tal?"], ["Me encanta leer libros."]]
    scores = bleu_scores(["¿Qué tal?", "Me encanta leer libros."], references)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["normalized_bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    # Normalized scores forgive case and punctuation; standard ones do not.
    loose = bleu_scores(["qué tal", "me encanta leer libros"], references)
    assert loose["normalized_bleu"] == pytest.approx(100.0) and loose["bleu"] < 100.0


def test_normalize_and_tidy():
    assert normalize("¡Hola, Mundo!  ¿Qué tal?") == "hola mundo qué tal"
    assert tidy("¿ Qué hora es ?") == "¿Qué hora es?"
    assert tidy("Sí , claro . ¡ Vamos !") == "Sí, claro. ¡Vamos!"
    assert tidy("I don ' t know a well - known man .") == "I don't know a well-known man."


def test_batches_shift_targets_mask_labels_and_bucket_lengths():
    source = [np.arange(1, n + 1, dtype="int32") for n in (3, 9, 4, 8, 5)]
    target = [np.asarray([2, *range(5, 5 + n), 3], "int32") for n in (2, 7, 3, 6, 4)]
    plan = BucketPlan((8, 16), batch_tokens=32, multiple=2)  # batches of 4 x 8 and 2 x 16
    batches = PairBatches(source, target, plan, seed=0)
    shapes, seen = [], []
    for index in range(len(batches)):
        inputs, labels, weights = batches[index]
        assert inputs["target"].shape == labels.shape
        assert (inputs["target"][:, 0] == 2).all()
        shapes.append(inputs["source"].shape)
        seen += [int(row) for row in batches.order[index][1] if row >= 0]
        real = batches.order[index][1] >= 0
        assert (weights[real] == (labels[real] != 0)).all() and not weights[~real].any()
    # short pairs in one 4 x 8 batch, long ones in 2 x 16 ones; top-ups weigh nothing
    assert sorted(shapes) == [(2, 16), (4, 8)] and sorted(seen) == [0, 1, 2, 3, 4]
    assert batches.target_tokens() == sum(len(t) - 1 for t in target)
    assert len(batches.skip(1)) == 1
    fixed = PairBatches(source, target, BucketPlan.single(10, 4))
    assert [fixed[i][0]["source"].shape for i in range(len(fixed))] == [(4, 10), (4, 10)]
    assert fixed[0][1].shape == (4, 10)


@pytest.mark.integration
def test_served_translator_answers_strings_and_rejects_bad_payloads(translation_store):
    run_id = runs()["transformer"].info.run_id
    with served(f"runs:/{run_id}/model", translation_store / "serve.log") as url:
        status, body = post(url, json.dumps({"inputs": ["How are you?", ""]}).encode())
        assert status == 200
        assert len(body["predictions"]) == 2 and body["predictions"][1] == ""
        for payload, hint in ((b"{not json", ""), (json.dumps({"inputs": [1]}).encode(), "str"),
                              (json.dumps({"inputs": []}).encode(), "at least one sentence")):
            status, body = post(url, payload)
            assert 400 <= status < 500 and hint in json.dumps(body)
        assert post(url, json.dumps({"inputs": ["I see the cat."]}).encode())[0] == 200
        status, body = post(url, json.dumps({"inputs": ["I see the cat."],
                                             "params": {"n_best": 2}}).encode())
        assert status == 200 and {"translation", "score"} == set(body["predictions"][0][0])
        status, body = post(url, json.dumps({"inputs": ["I see the cat. ||| Veo el gato."],
                                             "params": {"score": True}}).encode())
        assert status == 200 and body["predictions"][0]["log_likelihood"] < 0


@pytest.mark.integration
def test_logged_translator_ships_only_the_code_it_needs(translation_store, tmp_path):
    import mlflow

    run_id = runs()["transformer"].info.run_id
    code = Path(mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model/code",
                                                    dst_path=str(tmp_path)))
    assert sorted(p.name for p in code.iterdir()) == ["data_prep", "layers", "process", "workflows"]
    assert sorted(p.name for p in (code / "workflows").iterdir()) == ["core", "seq2seq"]
    # of the core, the compiled model calls and batches, the model folder, the configs,
    # the precision the model was built in and the exports it may be served through
    assert sorted(p.name for p in (code / "workflows" / "core").iterdir()) == [
        "__init__.py", "batches.py", "compilation.py", "config.py", "devices.py",
        "export.py", "model_folder.py", "precision.py"]


@pytest.mark.integration
def test_the_docs_blocks_that_load_a_translator_run_on_one(translation_store):
    import mlflow

    from tests.test_docs import doc_blocks, run_block

    blocks = doc_blocks("docs/translation.md", "runs:/") + doc_blocks("README.md",
                                                                      "How are you?")
    assert len(blocks) == 2
    for block in blocks:  # the README's block follows one that imports mlflow
        run_block(block, runs()["transformer"].info.run_id, {"mlflow": mlflow})


@pytest.mark.integration
def test_beam_width_param_is_declared_validated_and_reaches_the_decoder(translation_store):
    import mlflow
    from mlflow.exceptions import MlflowException

    run_id = runs()["transformer"].info.run_id
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    assert [p.name for p in model.metadata.signature.params] == [
        "beam_width", "length_penalty", "n_best", "score"]
    (best,) = model.predict(["How are you?"], params={"n_best": 2})
    assert 1 <= len(best) <= 2 and set(best[0]) == {"translation", "score"}
    assert [h["score"] for h in best] == sorted((h["score"] for h in best), reverse=True)
    scored = model.predict(["How are you?\t¿Cómo estás?", "Hi. ||| Hola."],
                           params={"score": True})
    assert [set(row) for row in scored] == [{"log_likelihood", "tokens"}] * 2
    assert scored[0]["log_likelihood"] < 0 and scored[0]["tokens"] >= 2
    for params, message in (({"score": True}, "each input is a sentence pair"),
                            ({"n_best": -1}, "n_best must be a whole number"),
                            ({"n_best": 2, "score": True}, "separate requests")):
        with pytest.raises(MlflowException, match=message):
            model.predict(["How are you?"], params=params)
    translator = model.unwrap_python_model().translator
    calls, translate = [], translator.translate

    def recorded(texts, beam_width=None, length_penalty=None):
        calls.append((beam_width, length_penalty))
        return translate(texts, beam_width, length_penalty)

    translator.translate = recorded
    model.predict(["How are you?"], params={"beam_width": 3, "length_penalty": 0.6})
    model.predict(["How are you?"], params={"beam_width": 1})
    model.predict(["How are you?"])
    assert calls == [(3, 0.6), (1, 0.0), (None, 0.0)]  # None: the translator's own width
    for bad in (-3, 100000):
        with pytest.raises(MlflowException, match="beam_width must be a whole number"):
            model.predict(["How are you?"], params={"beam_width": bad})
    with pytest.raises(MlflowException, match="length_penalty must be a number from 0 to 5"):
        model.predict(["How are you?"], params={"length_penalty": 7.0})


@pytest.mark.parametrize("argv, message", [
    (["translate", "--beam-width", "-3", "Hi."], "--beam-width must be from 1 (greedy) to 64"),
    (["translate", "--beam-width", "100000", "Hi."], "--beam-width must be from 1"),
    (["evaluate", "--limit", "0"], "--limit must be at least 1"),
    (["translate", "--run-id", "", "Hi."], "--run-id is empty"),
    (["train", "--set", "latent_dim=8"], "latent_dim does not apply to transformer"),
    (["train", "--preset", "cpu", "--set", "epochs=0"], "epochs must be at least 1"),
    (["train", "--set", "label_smoothing=1.5"], "label_smoothing must be less than 1"),
    (["train", "--set", "optimizer=adamm"], "optimizer must be one of rmsprop, adam"),
])
def test_more_bad_input_is_one_line_and_exit_status_2(translation_folders, capsys, argv, message):
    assert workflow.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_files_are_one_line_errors(translation_folders, tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("epochs: [1, 2\n")
    (tmp_path / "tag.yaml").write_text("epochs: !!python/object/apply:os.system ['true']\n")
    (tmp_path / "latin1.txt").write_bytes("¿Qué?\n".encode("latin-1"))
    for argv, message in (
            (["translate", "--file", str(tmp_path)], "is a folder"),
            (["translate", "--file", str(tmp_path / "none.txt")], "does not exist"),
            (["translate", "--file", str(tmp_path / "latin1.txt")], "is not UTF-8 text"),
            (["train", "--config", str(tmp_path / "bad.yaml")], "is not valid YAML"),
            (["train", "--config", str(tmp_path / "tag.yaml")], "is not valid YAML"),
            (["train", "--config", str(tmp_path)], "is not a YAML file of a config")):
        assert workflow.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


@pytest.mark.integration
def test_es_en_direction_end_to_end_and_runs_chosen_by_direction(translation_store, capsys,
                                                                  monkeypatch):
    assert workflow.main(["run", "--preset", "cpu", "--direction", "es-en", *TINY_TRANSFORMER,
                          "--limit", "10"]) == 0
    out = capsys.readouterr().out
    assert "¿Cómo estás?\n  -> " in out  # the Spanish examples
    es_en = runs("es-en")["transformer"]
    en_es = max(runs().values(), key=lambda run: run.info.start_time)  # the latest en-es
    assert es_en.data.tags["direction"] == "es-en"
    assert "test_beam4_bleu" in es_en.data.metrics
    _, translator = workflow.load_run_translator(direction="es-en")
    assert translator.tokenizer.direction == "es-en"
    assert translator.tokenizer.source_vocabulary == workflow.load_data(
        workflow.make_config("transformer", "cpu", {"direction": "es-en"})).tokenizer \
        .source_vocabulary
    for direction, run in (("es-en", es_en), ("en-es", en_es)):
        assert workflow.main(["translate", "--direction", direction, "Hola."]) == 0
        assert run.info.run_id in capsys.readouterr().out
    assert workflow.main(["translate", "--direction", "en-es", "--run-id",
                          es_en.info.run_id[:12], "Hola."]) == 2
    assert "was not trained with direction en-es" in capsys.readouterr().err
    served = []
    monkeypatch.setattr(servers, "serve", lambda uri, *args: served.append(uri))
    assert workflow.main(["serve", "--direction", "es-en", "--port", "5099"]) == 0
    assert served == [f"runs:/{es_en.info.run_id}/model"]
    capsys.readouterr()
    assert workflow.main(["compare", "--direction", "es-en", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and ",es-en,transformer," in lines[1]


@pytest.mark.integration
def test_one_vocabulary_for_both_languages_shares_the_embeddings(translation_store, capsys):
    joint = ["--set", "tokenization=joint_wordpiece", "--set", "joint_vocabulary_size=300"]
    tiny = ["--epochs", "1", "--set", "embed_dim=16", "--set", "dense_dim=32", "--set",
            "num_heads=2", "--set", "batch_tokens=256", "--set", "bleu_sentences=2"]
    assert workflow.main(["train", "--preset", "cpu", *tiny, *joint, "--set",
                          "share_embeddings=true"]) == 0
    run, translator = workflow.load_run_translator()
    assert run.data.params["share_embeddings"] == "True"
    tokenizer, model = translator.tokenizer, translator.model
    assert tokenizer.kind == "joint_wordpiece"
    assert tokenizer.source_vocabulary == tokenizer.target_vocabulary
    assert 0 < len(tokenizer.source_vocabulary) <= 300
    assert {"The", "El"} <= set(tokenizer.source_vocabulary)  # both languages
    assert model.source_embedding is model.target_embedding  # after a .keras round trip
    assert isinstance(translator.translate(["I am happy."])[0], str)
    capsys.readouterr()
    assert workflow.main(["train", "--preset", "cpu", "--set", "share_embeddings=true"]) == 2
    assert "share_embeddings" in capsys.readouterr().err


@pytest.mark.integration
def test_max_train_minutes_is_the_wall_time_of_the_whole_train_command(tmp_path):
    import time

    import mlflow

    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip", generated_spa_lines())
    env = {**__import__("os").environ, "NLPKIT_WORK_DIR": str(tmp_path / "work"),
           "NLPKIT_SPA_ENG_PATH": str(archive),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    minutes = 1.5
    started = time.monotonic()
    trained = subprocess.run([sys.executable, "-m", "workflows.translation", "train", "--preset",
                              "cpu", *TINY_TRANSFORMER, "--epochs", "1000", "--set",
                              "patience=1000", "--max-train-minutes", str(minutes)],
                             env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert elapsed < minutes * 60 + 60 and "would not leave" in trained.stdout
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    (run,) = mlflow.search_runs(experiment_names=["translation"], output_format="list")
    assert run.info.status == "FINISHED" and run.data.metrics["trained_epochs"] >= 1
    assert run.data.metrics["system/train_wall_minutes"] <= minutes + 0.25
