"""One harness for every sentiment family, as keras-hub tests its tasks: build the family's
classifier on a user's tiny file, train a batch, save it, reload it with plain
`keras.saving.load_model` and get the same answers to raw strings, in few compiled
shapes whatever the number of texts."""

import dataclasses

import keras
import numpy as np
import pytest

from data_prep import text_classes
from tests.data_prep.fixtures import write_tiny_encoder, write_tiny_hub_preset
from tests.workflows.test_any_text import AWKWARD, write_labelled
from workflows import imdb_sentiment as workflow
from workflows.core.model_folder import MODEL_FILE
from workflows.sentiment.sources import LabelledFiles
from workflows.sentiment.text_classifier import TextClassifier, save_classifier

WORDS = ["good", "bad", "film", "plot", "great", "dull", "fine", "awful"]
ROWS = [f"{WORDS[i % 8]} {WORDS[(3 * i + 1) % 8]} {WORDS[(5 * i + 2) % 8]} film {i}"
        for i in range(40)]
LABELS = ["yes" if "good" in row or "great" in row or "fine" in row else "no" for row in ROWS]
TINY = {"batch_size": 8, "epochs": 1, "seed": 3}
FAMILIES = {  # --model -> its tiny settings (a keras-hub preset or encoder folder: "encoder")
    "bow": {"hidden_units": 4, "max_tokens": 200},
    "nbsvm": {"max_tokens": 200},
    "bilstm": {"embed_dim": 4, "units": 2, "sequence_length": 32, "max_tokens": 200},
    "transformer": {"embed_dim": 8, "dense_dim": 8, "num_heads": 2, "sequence_length": 32,
                    "max_tokens": 200},
    "doc2vec": {"vector_size": 8, "doc2vec_epochs": 2, "min_count": 1},
    "encoder": {"max_review_tokens": 32, "sentence_slices": 0},
    "hub": {"max_review_tokens": 16, "sentence_slices": 0},
}


@pytest.fixture(scope="module")
def encoders_of(tmp_path_factory):
    return tiny_encoders(tmp_path_factory.mktemp("encoders"))


def tiny_encoders(root):
    """`{"encoder": the kit's BERT folder, "hub": a keras-hub preset}`, tiny, of `WORDS`."""
    return {"encoder": write_tiny_encoder(root / "bert", words=WORDS + ["yes", "no"]),
            "hub": write_tiny_hub_preset(root / "hub", "bert", WORDS)}


def trained_classifier(model, root, encoder=None):
    """`model`'s `TextClassifier`, built by the lesson's own `build` on a user's file of
    three classes and trained on one batch."""
    path = root / "texts.csv"
    write_labelled(path, ROWS, [label if i % 5 else "maybe" for i, label in
                                enumerate(LABELS)])
    family = "encoder" if model == "hub" else model
    config = dataclasses.replace(workflow.family(family).MODELS[family], **TINY,
                                 **FAMILIES[model])
    if encoder is not None:
        config = dataclasses.replace(config, encoder=str(encoder))
    source = LabelledFiles(text_classes.TextsFiles(str(path)))
    prepared = source.prepare(workflow.data_settings(source, config), root)
    data = workflow.LabelledData(prepared, "tiny", encoder=encoder, source=source)
    trainable = workflow.family(family).build(config, data)
    trainable.model.fit(trainable.train_batches(0), epochs=1, steps_per_epoch=1, verbose=0)
    return trainable.classifier


@pytest.mark.parametrize("model", [pytest.param(model, marks=pytest.mark.integration)
                                   if model not in ("bow", "bilstm") else model
                                   for model in FAMILIES])
def test_every_family_is_a_keras_model_that_reads_strings_and_reloads_the_same(
        model, tmp_path, encoders_of):
    classifier = trained_classifier(model, tmp_path, encoders_of.get(model))
    assert isinstance(classifier, TextClassifier) and classifier.classes == ["maybe", "no",
                                                                             "yes"]
    asked = ["a good film", *ROWS[:13], *AWKWARD, ""]
    answers = classifier.predict(asked)
    assert answers.shape == (len(asked), 3)
    np.testing.assert_allclose(answers.sum(axis=1), 1, atol=1e-5)
    save_classifier(tmp_path / "classifier", classifier)
    reloaded = keras.saving.load_model(tmp_path / "classifier" / MODEL_FILE)
    assert type(reloaded) is TextClassifier and reloaded.classes == classifier.classes
    np.testing.assert_allclose(reloaded.predict(asked), answers, atol=1e-5)
    assert reloaded.predict([]).shape == (0, 3)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="counts TensorFlow traces")
def test_any_number_of_texts_is_scored_in_a_few_traced_shapes(tmp_path, encoders_of):
    classifier = trained_classifier("bilstm", tmp_path)
    scores = {count: classifier.predict(["a good film"] * count) for count in (3, 64, 65, 1)}
    assert classifier._forward.experimental_get_tracing_count() <= 2
    assert [len(score) for score in scores.values()] == [3, 64, 65, 1]
    np.testing.assert_allclose(scores[65], np.repeat(scores[3][:1], 65, axis=0), atol=1e-6)
