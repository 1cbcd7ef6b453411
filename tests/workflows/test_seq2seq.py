"""The seq2seq package: translators saved before it still load, decode and translate the same."""

import json
from pathlib import Path

import numpy as np
import pytest

from workflows.seq2seq.models import GRUTranslator, TransformerTranslator
from workflows.seq2seq.translator import Translator

LEGACY = Path(__file__).with_name("legacy_translators")


@pytest.mark.parametrize("name, kind", [("transformer", TransformerTranslator),
                                        ("transformer_tutorial", TransformerTranslator),
                                        ("gru_attention", GRUTranslator)])
def test_translators_saved_as_plain_functional_models_load_and_decode_the_same(name, kind):
    expected = json.loads((LEGACY / name / "expected.json").read_text())
    translator = Translator.load(LEGACY / name)
    assert isinstance(translator.model, kind)
    source = np.asarray(expected["source"], "int32")
    assert translator.generate(source, 1).tolist() == expected["greedy"]
    assert translator.generate(source, 2).tolist() == expected["beam2"]
    assert translator.translate(["I see the dog", "you is big"], beam_width=1) \
        == expected["texts"]


def test_a_converted_translator_saves_as_its_class_and_reloads_the_same(tmp_path):
    translator = Translator.load(LEGACY / "transformer")
    reloaded = Translator.load(translator.save(tmp_path / "again"))
    assert type(reloaded.model) is TransformerTranslator
    assert reloaded.model.get_config() == translator.model.get_config()
    source = np.asarray([[2, 3, 4, 0]], "int32")
    assert (reloaded.generate(source, 2) == translator.generate(source, 2)).all()
    weights = zip(reloaded.model.get_weights(), translator.model.get_weights(), strict=True)
    assert all(np.array_equal(a, b) for a, b in weights)


@pytest.mark.parametrize("name", ["transformer", "gru_attention"])
def test_cross_attention_weights_have_one_row_per_output_token(name):
    translator = Translator.load(LEGACY / name)
    source_tokens, output_tokens, weights = translator.cross_attention("I see the dog")
    assert source_tokens == ["i", "see", "the", "dog"]
    assert weights.shape == (len(output_tokens), len(source_tokens))
    assert np.all(np.isfinite(weights))


def test_the_presets_and_the_logged_translator_agree_on_the_widest_beam():
    from workflows.seq2seq import presets, translator

    assert presets.MAX_BEAM_WIDTH == translator.MAX_BEAM_WIDTH
