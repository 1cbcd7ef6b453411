"""A run's model out of the kit: every sentiment family's classifier exported as ONNX, a
SavedModel and LiteRT answers what the Keras model answers (its calibration inside) on
100 inputs, in float32 (max abs difference <= 1e-4) and with int8 weights; the export
step logs the artifact to the run and its five lines of usage run as printed; a bad
format, an ensemble and a store without a model are one line."""

import json
import subprocess
import sys

import keras
import mlflow
import numpy as np
import pytest

from tests.test_docs import doc_blocks
from tests.workflows.serving import post, served
from tests.workflows.test_any_text import AWKWARD, tiny_trained
from tests.workflows.test_families import FAMILIES, ROWS, tiny_encoders, trained_classifier
from workflows import imdb_sentiment as workflow
from workflows import serve_model
from workflows.core import export, models, runs
from workflows.core.export import Exportable
from workflows.sentiment.calibration import Calibration
from workflows.sentiment.exported import as_arrays, calibrated_network

ASKED = [*ROWS, *AWKWARD, "", "a good film " * 40, *ROWS[:22]]  # 100 texts
FORMATS = list(export.FORMATS)
RECURRENT = ("bilstm",)  # LiteRT's interpreter lacks their loop's TensorFlow ops (Flex)


def exported_answers(classifier, calibration, format, quantize, folder):
    """The Keras model's and the exported artifact's answers to `ASKED`."""
    model = calibrated_network(classifier, calibration)
    arrays = as_arrays(classifier.preprocessor.encode(ASKED), model)
    expected = keras.ops.convert_to_numpy(model(arrays))
    exportable = Exportable(model, as_arrays(classifier.preprocessor.encode(ASKED[:1]), model))
    written = export.export_run(exportable, "run0", format, quantize, folder)
    answer, names = export.load_export(written)
    return expected, answer(export.named_arrays(arrays, names))


@pytest.mark.integration
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("model", FAMILIES)
def test_every_family_exports_with_the_answers_of_its_keras_model(model, format, tmp_path,
                                                                  encoders_of):
    classifier = trained_classifier(model, tmp_path, encoders_of.get(model))
    if format == "litert" and model in RECURRENT:
        with pytest.raises(export.ExportFailedError, match="runtime cannot run this model"):
            exported_answers(classifier, Calibration(0.6), format, "none", tmp_path / "out")
        return
    expected, found = exported_answers(classifier, Calibration(0.6, (0, 0.3, -0.2)), format, "none",
                                       tmp_path / "exports")
    assert found.shape == (len(ASKED), 3)
    assert np.abs(found - expected).max() <= 1e-4


@pytest.mark.integration
@pytest.mark.parametrize("format", FORMATS)
def test_two_classes_export_their_platt_scaling_and_int8_weights_stay_close(format, tmp_path):
    rows = [f"{'good' if i % 2 else 'bad'} film {i}" for i in range(24)]
    classifier, _ = tiny_trained("bow", rows, ["yes" if i % 2 else "no" for i in range(24)],
                                 tmp_path)
    platt = Calibration(slope=1.4, bias=(0.0, -0.3))
    expected, found = exported_answers(classifier, platt, format, "none", tmp_path / "f32")
    assert np.abs(found - expected).max() <= 1e-4
    expected_pyfunc = platt.apply(classifier.predict(ASKED))  # what the pyfunc answers
    assert np.abs(found[:, 1] - expected_pyfunc).max() <= 1e-4
    _, quantized = exported_answers(classifier, platt, format, "int8", tmp_path / "int8")
    np.testing.assert_allclose(quantized.sum(axis=1), 1, atol=1e-5)
    assert np.abs(quantized - found).max() <= 0.05  # int8 weights: close, not equal


@pytest.mark.integration
def test_the_export_step_logs_each_format_and_the_docs_lines_call_it(own_texts_store, capsys):
    path = own_texts_store / "texts.tsv"
    path.write_text("".join(f"{row}\t{'yes' if 'good' in row else 'no'}\n" for row in ROWS))
    assert workflow.main(["train", "--texts", str(path), "--model", "bow", "--epochs", "1",
                          "--set", "hidden_units=4"]) == 0
    run = runs.model_run(workflow.LESSON)
    served = models.load_pyfunc(run).predict(["A gripping, beautifully shot film."])[0]
    blocks = doc_blocks("docs/export.md", "(answers,) =")
    assert len(blocks) == len(FORMATS)
    for format, block in zip(FORMATS, blocks, strict=True):
        assert workflow.main(["export", "--format", format]) == 0
        folder = own_texts_store / "work" / "exports" / run.info.run_id / format
        assert export.usage(folder) == block and block in capsys.readouterr().out
        logged = {item.path for item in mlflow.MlflowClient().list_artifacts(
            run.info.run_id, f"exports/{format}")}
        assert {f"exports/{format}/{name}" for name in (
            "usage.py", "classes.json", "preprocessing.json", "export.json")} <= logged
        shown = subprocess.run([sys.executable, "-c", block], cwd=folder, text=True,
                               capture_output=True, check=True).stdout
        classes = json.loads((folder / "classes.json").read_text())
        np.testing.assert_allclose(json.loads(shown)[0], [served["probabilities"][name]
                                                          for name in classes], atol=1e-4)


@pytest.mark.integration
def test_a_served_model_answers_through_its_export_as_it_does_through_keras(own_texts_store,
                                                                            capsys):
    path = own_texts_store / "texts.tsv"
    path.write_text("".join(f"{row}\t{['yes', 'no', 'maybe'][i % 3]}\n"
                            for i, row in enumerate(ROWS)))
    assert workflow.main(["train", "--texts", str(path), "--model", "bow", "--epochs", "1",
                          "--set", "hidden_units=4"]) == 0
    run = runs.model_run(workflow.LESSON)
    uri = models.model_uri(run.info.run_id)
    assert serve_model.main([uri, "--export", "onnx"]) == 2  # not exported yet
    assert "has no export 'onnx'" in capsys.readouterr().err
    assert workflow.main(["export", "--format", "onnx", "--quantize", "int8"]) == 0
    asked = [*ROWS[:30], *(f"a good{character}film" for character in AWKWARD)]
    expected = models.load_pyfunc(run).predict(asked)
    with served(uri, own_texts_store / "server.log", flags=["--export", "onnx-int8",
                                                             "--max-inputs", "100"]) as url:
        status, body = post(url, json.dumps({"inputs": asked}).encode())
        assert status == 200
        for found, wanted in zip(body["predictions"], expected, strict=True):
            np.testing.assert_allclose([found["probabilities"][c] for c in sorted(wanted[
                "probabilities"])], [wanted["probabilities"][c] for c in sorted(wanted[
                    "probabilities"])], atol=0.05)  # int8 weights: close, not equal
        assert post(url, json.dumps({"inputs": ["a"] * 101}).encode())[0] == 413


def test_a_bad_format_or_quantization_is_one_line(own_texts_store, capsys):
    for flags in (["--format", "pdf"], ["--format", "onnx", "--quantize", "int3"]):
        assert workflow.main(["export", *flags]) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith("error:") and len(error.splitlines()) == 1
    assert workflow.main(["export", "--format", "onnx"]) == 2  # no run has a model
    assert "error:" in capsys.readouterr().err


@pytest.fixture(scope="module")
def encoders_of(tmp_path_factory):
    return tiny_encoders(tmp_path_factory.mktemp("encoders"))


@pytest.fixture
def own_texts_store(tmp_path, monkeypatch, new_store, restore_tracking_uri):
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", new_store(tmp_path / "mlflow.db"))
    return tmp_path


@pytest.mark.integration
@pytest.mark.parametrize("format", FORMATS)
def test_a_model_computing_in_bfloat16_exports_as_its_float32_copy(format, tmp_path):
    """The `cpu` translator trains in mixed_bfloat16, which tf2onnx cannot convert: the
    export is a float32 copy with its weights, answering as that copy does (1e-4) and
    as the bfloat16 model does within bfloat16's precision; the model itself is kept."""
    from workflows import translation

    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = translation.build_model(translation.make_config("transformer", "cpu", {
            "embed_dim": 16, "dense_dim": 32, "num_heads": 2, "sequence_length": 12,
            "dtype_policy": "mixed_bfloat16"}), 40, 50)
    finally:
        keras.config.set_dtype_policy("float32")
    rng = np.random.default_rng(0)
    arrays = {"source": rng.integers(1, 40, (100, 9)).astype("int32"),
              "target": rng.integers(1, 50, (100, 7)).astype("int32")}
    example = {name: array[:1] for name, array in arrays.items()}
    written = export.export_run(Exportable(model, example), "run0", format, "none", tmp_path)
    answer, names = export.load_export(written)
    found = answer(export.named_arrays(arrays, names))
    copy = export.in_float32(model, example)
    assert copy is not model and copy.dtype_policy.name == "float32"
    assert model.dtype_policy.name == "mixed_bfloat16"
    np.testing.assert_allclose(found, keras.ops.convert_to_numpy(copy(arrays)), atol=1e-4)
    np.testing.assert_allclose(found, keras.ops.convert_to_numpy(model(arrays)), atol=0.1)
