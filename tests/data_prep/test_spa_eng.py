import numpy as np
import pytest

from data_prep import cache, spa_eng, text
from tests.data_prep.fixtures import SPA_LINES, write_spa_eng_zip


def test_parse_reports_malformed_lines_with_numbers():
    text = "Go.\tVe.\n  Hi.  \t  Hola.  \tCC-BY 2.0 attribution\nno tab here\n\nOnly\t \n"
    pairs, malformed = spa_eng.parse_pairs(text)
    assert pairs == [("Go.", "Ve."), ("Hi.", "Hola.")]
    assert [(m.line_number, m.reason) for m in malformed] == [
        (3, "no tab between English and Spanish"), (5, "empty English or Spanish side")]


def test_split_keeps_every_sentence_of_either_language_in_one_split_and_is_seeded():
    # English sentences share Spanish ones (and vice versa), chaining pairs together
    pairs = [(f"Sentence {i % 40}.", f"Frase {i % 55}.") for i in range(300)]
    pairs += [(f"Alone {i}.", f"Sola {i}.") for i in range(300)]
    pairs += [("sentence 1.", "otra"), ("Other.", "frase 2.")]  # other case, same sentence
    splits = spa_eng.split_by_component(pairs, seed=5)
    assert sorted(p for s in splits.values() for p in s) == sorted(pairs)
    for index in (0, 1):  # English, then Spanish
        keys = {name: {spa_eng.grouping_key(pair[index]) for pair in s}
                for name, s in splits.items()}
        assert keys["train"].isdisjoint(keys["val"]) and keys["train"].isdisjoint(keys["test"])
        assert keys["val"].isdisjoint(keys["test"])
    assert abs(len(splits["train"]) / len(pairs) - 0.7) < 0.06
    assert spa_eng.split_by_component(pairs, seed=5) == splits
    with pytest.raises(ValueError, match="summing to 1"):
        spa_eng.split_by_component(pairs, fractions=(0.5, 0.5, 0.5))


def test_pair_components_join_sentences_linked_through_either_language():
    pairs = [("A.", "x"), ("B.", "x"), ("B.", "y"), ("C.", "z"), ("c.", "w"), ("D.", "v")]
    components = spa_eng.pair_components(pairs)
    assert sorted(map(len, components)) == [1, 2, 3]
    assert sorted(sorted(c) for c in components)[0] == [("A.", "x"), ("B.", "x"), ("B.", "y")]
    assert spa_eng.component_sizes(pairs) == {1: 1, 2: 1, 3: 1}


def test_pairs_are_oriented_by_direction():
    pairs = [("Go.", "Ve.")]
    assert spa_eng.orient(pairs, "en-es") == [("Go.", "Ve.")]
    assert spa_eng.orient(pairs, "es-en") == [("Ve.", "Go.")]
    assert spa_eng.languages("en-fr") == ("en", "fr")  # a user's pair
    assert spa_eng.orient(pairs, "fr-en", ("en", "fr")) == [("Ve.", "Go.")]
    with pytest.raises(ValueError, match="direction"):
        spa_eng.languages("english-french")
    with pytest.raises(ValueError, match="is not en-es or es-en"):
        spa_eng.orient(pairs, "en-fr")


def test_test_references_keep_every_translation():
    pairs = [("I am tired.", "Estoy cansado."), ("Go.", "Ve."), ("I am tired.", "Estoy cansada.")]
    assert spa_eng.references_by_source(pairs) == {
        "I am tired.": ["Estoy cansado.", "Estoy cansada."], "Go.": ["Ve."]}


def test_prepare_vectorizers_round_trip_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "work"))
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip")
    settings = spa_eng.SpaEngSettings(max_tokens=100, sequence_length=8)
    prepared = spa_eng.prepare(archive, settings, verbose=False)
    assert prepared.summary["pairs"] == len(SPA_LINES)
    assert sum(prepared.summary["counts"].values()) == len(SPA_LINES)
    source, target = spa_eng.make_vectorizers(
        settings, prepared.vocabulary("source"), prepared.vocabulary("target"))
    assert target.get_vocabulary() == prepared.vocabulary("target")
    vocabulary = target.get_vocabulary()
    assert "[start]" in vocabulary and "[end]" in vocabulary
    assert not any("¿" in word or "¡" in word or "?" in word for word in vocabulary)
    ids = np.asarray(target([spa_eng.mark_target("¿Cómo estás?")]))[0]
    assert ids.shape == (9,) and vocabulary[ids[0]] == "[start]"
    assert np.asarray(source(["How are you?"])).shape == (1, 8)
    assert spa_eng.prepare(archive, settings, verbose=False).directory == prepared.directory
    # es-en: Spanish source without ¿¡, English target with the markers
    source, target = spa_eng.make_vectorizers(
        settings, prepared.vocabulary("source", "es-en"), prepared.vocabulary("target", "es-en"),
        "es-en")
    assert not any("¿" in word for word in prepared.vocabulary("source", "es-en"))
    assert "[start]" in prepared.vocabulary("target", "es-en")
    assert prepared.pairs("test", "es-en") == [(s, e) for e, s in prepared.pairs("test")]
    components = prepared.summary["pair_components"]
    assert components["count"] == sum(components["pairs_per_component"].values())


def test_wordpiece_vocabularies_are_learned_saved_and_reversible(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "work"))
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip")
    settings = spa_eng.SpaEngSettings(max_tokens=100, sequence_length=8,
                                      subword_vocabulary_size=120)
    prepared = spa_eng.prepare(archive, settings, verbose=False)
    vocabulary = prepared.wordpiece_vocabulary("target")
    assert vocabulary[:4] == list(spa_eng.SUBWORD_SPECIAL_TOKENS)
    assert len(vocabulary) <= 120 and "¿" in vocabulary
    assert prepared.summary["wordpiece_vocabulary_sizes"]["es"] == len(vocabulary)
    assert prepared.wordpiece_vocabulary("source", "es-en") == vocabulary
    target = text.make_wordpiece_tokenizer(prepared.wordpiece_vocabulary("target"))
    spanish = prepared.pairs("train")[0][1]
    ids = target([spanish])
    assert "[UNK]" not in target.detokenize(ids)[0]
    assert target.detokenize(ids)[0].replace(" ", "") == spanish.replace(" ", "")


def test_lines_that_are_not_utf8_are_skipped_and_reported_by_number(tmp_path, monkeypatch,
                                                                     capsys):
    import zipfile

    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "work"))
    text = ("\n".join(SPA_LINES[:3]) + "\n").encode() + b"Bad.\tMal\xff\xfe.\n" + \
        ("\n".join(SPA_LINES[3:]) + "\n").encode()
    archive = tmp_path / "spa-eng.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("spa-eng/spa.txt", text)
    prepared = spa_eng.prepare(archive, spa_eng.SpaEngSettings(max_tokens=100), verbose=False)
    assert prepared.summary["pairs"] == len(SPA_LINES)
    assert prepared.summary["malformed_lines"] == 1
    assert "spa.txt:4: skipped (not valid UTF-8 (byte 9))" in capsys.readouterr().out
    pairs, malformed = spa_eng.parse_pairs(b"\xef\xbb\xbfGo.\tVe.\n")  # a BOM is not a fault
    assert pairs == [("Go.", "Ve.")] and malformed == []
