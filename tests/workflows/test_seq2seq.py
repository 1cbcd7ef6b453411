"""The seq2seq package: a saved translator reloads as its class and decodes the same; a
folder of an older version gets one line."""

import numpy as np
import pytest

from data_prep.pair_tokens import Tokenizer
from workflows.causal_lm.generator import Generator
from workflows.core.model_folder import ModelFolderError
from workflows.seq2seq.gru import GRUTranslator
from workflows.seq2seq.presets import make_config
from workflows.seq2seq.transformer import TransformerTranslator
from workflows.seq2seq.translator import Translator
from workflows.translation import build_model

WORDS = ["", "[UNK]", "[start]", "[end]", "i", "see", "the", "dog", "you", "is", "big"]


def tiny_translator(model_name):
    """A tiny untrained translator of word tokens, as `translation train` builds one."""
    sizes = {"latent_dim": 8} if model_name == "gru_seq2seq" else {"dense_dim": 16,
                                                                    "num_heads": 2}
    config = make_config(model_name, "tutorial", {"embed_dim": 8, "sequence_length": 6,
                                                   "dtype_policy": "float32", **sizes})
    tokenizer = Tokenizer("word", WORDS, WORDS, config.sequence_length)
    model = build_model(config, len(WORDS), len(WORDS))
    return Translator(model, tokenizer, config.sequence_length, config.sequence_length + 1,
                      config.beam_width)


@pytest.mark.integration
@pytest.mark.parametrize("name, kind", [("transformer", TransformerTranslator),
                                        ("gru_seq2seq", GRUTranslator)])
def test_a_saved_translator_reloads_as_its_class_and_decodes_the_same(name, kind, tmp_path):
    translator = tiny_translator(name)
    reloaded = Translator.load(translator.save(tmp_path / "again"))
    assert type(reloaded.model) is kind
    assert reloaded.model.get_config() == translator.model.get_config()
    source = np.asarray([[4, 5, 6, 7, 0]], "int32")
    assert (reloaded.generate(source, 2) == translator.generate(source, 2)).all()
    weights = zip(reloaded.model.get_weights(), translator.model.get_weights(), strict=True)
    assert all(np.array_equal(a, b) for a, b in weights)


def test_a_translator_folder_of_an_older_version_is_refused_in_one_line(tmp_path):
    folder = tiny_translator("transformer").save(tmp_path / "old")
    (folder / "settings.json").rename(folder / "translator.json")  # as saved until now
    with pytest.raises(ModelFolderError, match="not a translator folder of this version"):
        Translator.load(folder)
    generator_folder = tmp_path / "generator"
    tiny_translator("transformer").save(generator_folder)
    with pytest.raises(ModelFolderError, match="not a generator folder"):
        Generator.load(generator_folder)  # a folder of another kind


@pytest.mark.parametrize("name", ["transformer", "gru_seq2seq"])
def test_cross_attention_weights_have_one_row_per_output_token(name):
    translator = tiny_translator(name)
    source_tokens, output_tokens, weights = translator.cross_attention("I see the dog")
    assert source_tokens == ["i", "see", "the", "dog"]
    assert weights.shape == (len(output_tokens), len(source_tokens))
    assert np.all(np.isfinite(weights))


def test_a_scanned_transformer_computes_what_the_unrolled_one_does():
    sizes = {"source_vocabulary_size": 30, "target_vocabulary_size": 30, "max_length": 8,
             "embed_dim": 8, "dense_dim": 16, "num_heads": 2, "encoder_layers": 3,
             "decoder_layers": 2, "norm_first": True, "tie_embeddings": True}
    unrolled = TransformerTranslator(**sizes)
    scanned = TransformerTranslator(**sizes, scan_blocks=True)
    copy_weights_into_stacks(unrolled, scanned)
    source = np.asarray([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]], "int32")
    target = np.asarray([[2, 4, 5, 0], [2, 6, 7, 8]], "int32")
    pairs = {"source": source, "target": target}
    np.testing.assert_allclose(scanned(pairs), unrolled(pairs), atol=1e-5)
    np.testing.assert_allclose(scanned.attention_weights(source, target),
                               unrolled.attention_weights(source, target), atol=1e-5)
    logits, _ = scanned.call_with_cache(target[:, :1], scanned.initial_cache(source, 6), 0)
    expected, _ = unrolled.call_with_cache(target[:, :1], unrolled.initial_cache(source, 6), 0)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert len(scanned.trainable_weights) < len(unrolled.trainable_weights)
    assert scanned.count_params() == unrolled.count_params()


def copy_weights_into_stacks(unrolled, scanned):
    """`scanned` given `unrolled`'s weights: block i's into slice i of each stack."""
    by_path = {variable.path: np.asarray(variable.value) for variable in unrolled.weights}
    for stack, kind in ((scanned.encoder_blocks, "encoder"), (scanned.decoder_blocks, "decoder")):
        for stacked, variable in zip(stack.stacked, stack.template.trainable_variables,
                                     strict=True):
            inside = variable.path.split(stack.template.name + "/", 1)[1]
            stacked.assign(np.stack([by_path[f"{kind}_{index}/{inside}"]
                                     for index in range(stack.depth)]))
    for variable in scanned.weights:
        if variable.path in by_path:
            variable.assign(by_path[variable.path])


def test_the_presets_and_the_logged_translator_agree_on_the_widest_beam():
    from workflows.seq2seq import presets, translator

    assert presets.MAX_BEAM_WIDTH == translator.MAX_BEAM_WIDTH
