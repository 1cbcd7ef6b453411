"""`--set extend_vocabulary=N` on a keras-hub WordPiece preset: the texts' most frequent
words that the preset cuts into three or more pieces become one token each, their
embedding rows the mean of their pieces', every other weight kept; the trained
classifier saves and reloads with plain `keras.saving.load_model` answering the same."""

import dataclasses

import keras
import numpy as np
import pytest

from data_prep import encoders, text_classes
from tests.data_prep.fixtures import write_tiny_hub_preset
from tests.workflows.test_any_text import write_labelled
from workflows import imdb_sentiment as workflow
from workflows.core.model_folder import MODEL_FILE
from workflows.sentiment import hub_vocabulary
from workflows.sentiment.hub_classifier import load_task
from workflows.sentiment.sources import LabelledFiles
from workflows.sentiment.text_classifier import save_classifier

KNOWN = ["the", "was", "a", "film"]
TEXTS = (["the cinematography was superb"] * 5 + ["the soundtrack was dull"] * 3
         + ["a film", "the cinematography was dull"])


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    return write_tiny_hub_preset(tmp_path_factory.mktemp("preset") / "tiny_bert", "bert",
                                 KNOWN, letters=True)


def ids_of(tokenizer, text):
    return np.asarray(tokenizer([text])[0]).tolist()


def test_the_most_frequent_split_words_become_one_token_each_where_their_pieces_pointed(
        preset):
    task = load_task(preset, 2, 16)
    tokenizer = task.preprocessor.tokenizer
    size = tokenizer.vocabulary_size()
    old = {weight.path: keras.ops.convert_to_numpy(weight) for weight in task.backbone.weights}
    embedding = task.backbone.token_embedding.embeddings.path
    pieces = {word: ids_of(tokenizer, word) for word in ("cinematography", "superb", "dull")}
    before = sequence_output(task, "a film")

    grown, words = hub_vocabulary.extended(task, TEXTS, 3)
    assert words == ["cinematography", "superb", "dull"]  # 6, 5, 4 times; "soundtrack" 3
    tokenizer = grown.preprocessor.tokenizer
    assert [ids_of(tokenizer, word) for word in words] == [[size], [size + 1], [size + 2]]
    assert ids_of(tokenizer, "soundtrack") == pieces_of(tokenizer, "soundtrack")
    table = keras.ops.convert_to_numpy(grown.backbone.token_embedding.embeddings)
    assert table.shape[0] == size + 3
    np.testing.assert_array_equal(table[:size], old[embedding])
    for row, word in enumerate(words, start=size):
        np.testing.assert_allclose(table[row], old[embedding][pieces[word]].mean(axis=0),
                                   rtol=1e-6)
    for weight in grown.backbone.weights:
        if weight.path != embedding:
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(weight), old[weight.path])
    after = sequence_output(grown, "a film")
    np.testing.assert_allclose(after, before, atol=1e-6)  # a text of old words: the same


def sequence_output(task, text):
    return keras.ops.convert_to_numpy(task.backbone(task.preprocessor([text]))["sequence_output"])


def pieces_of(tokenizer, word):
    """The ids of a word's letters, as the letters-only vocabulary cuts it."""
    vocabulary = tokenizer.get_vocabulary()
    return [vocabulary.index(word[0])] + [vocabulary.index(f"##{c}") for c in word[1:]]


def test_a_byte_level_preset_is_refused_in_one_line(tmp_path):
    task = load_task(write_tiny_hub_preset(tmp_path / "roberta", "roberta"), 2, 16)
    with pytest.raises(encoders.EncoderError, match="grows a WordPiece vocabulary.*"
                                                    "RobertaTokenizer: leave"):
        hub_vocabulary.extended(task, TEXTS, 3)


def test_the_setting_is_refused_for_the_kits_own_bert(capsys):
    assert workflow.main(["settings", "--model", "encoder", "--set",
                          "extend_vocabulary=5"]) == 2
    assert "extend_vocabulary" in capsys.readouterr().err


@pytest.mark.integration
def test_a_grown_preset_classifier_trains_saves_and_reloads_answering_the_same(
        preset, tmp_path):
    path = tmp_path / "texts.csv"
    write_labelled(path, TEXTS * 4, ["yes" if "superb" in text else "no" for text in TEXTS * 4])
    config = dataclasses.replace(
        workflow.family("encoder").MODELS["encoder"], encoder=str(preset), batch_size=8,
        epochs=1, max_review_tokens=16, sentence_slices=0, extend_vocabulary=2)
    source = LabelledFiles(text_classes.TextsFiles(str(path)))
    prepared = source.prepare(workflow.data_settings(source, config), tmp_path)
    data = workflow.LabelledData(prepared, "tiny", encoder=preset, source=source)
    trainable = workflow.family("encoder").build(config, data)
    assert trainable.metrics["added_words"] == 2
    trainable.model.fit(trainable.train_batches(0), epochs=1, steps_per_epoch=2, verbose=0)
    asked = ["the cinematography was superb", "the soundtrack was dull", "a film", ""]
    answers = trainable.classifier.predict(asked)
    save_classifier(tmp_path / "classifier", trainable.classifier)
    reloaded = keras.saving.load_model(tmp_path / "classifier" / MODEL_FILE)
    np.testing.assert_allclose(reloaded.predict(asked), answers, atol=1e-5)
    tokenizer = reloaded.preprocessor.preprocessor.tokenizer
    assert len(ids_of(tokenizer, "cinematography")) == 1


@pytest.mark.integration
def test_train_with_extend_vocabulary_logs_the_words_and_serves_the_grown_model(
        own_store, preset, tmp_path, capsys):
    import mlflow

    from workflows.core import models

    path = tmp_path / "texts.csv"
    write_labelled(path, TEXTS * 6, ["yes" if "superb" in text else "no" for text in TEXTS * 6])
    assert workflow.main(["train", "--model", "encoder", "--encoder", str(preset), "--texts",
                          str(path), "--epochs", "1", "--set", "batch_size=8", "--set",
                          "max_review_tokens=16", "--set", "extend_vocabulary=2"]) == 0
    assert "Added 2 of the texts' words" in capsys.readouterr().out
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    run = mlflow.search_runs([experiment.experiment_id], output_format="list")[0]
    assert run.data.metrics["added_words"] == 2 and run.data.params["extend_vocabulary"] == "2"
    words = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/added_words.txt")
    assert words.split("\n") == ["cinematography", "superb"]
    answers = models.load_pyfunc(run).predict(["the cinematography was superb", "a film"])
    assert [sorted(answer["probabilities"]) for answer in answers] == [["no", "yes"]] * 2
