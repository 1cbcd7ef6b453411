"""Plain-Python text helpers: HTML cleaning and sentence slices."""

from data_prep.text import clean_html, sentence_slices


def test_clean_html_drops_tags_and_decodes_entities():
    assert clean_html("Great<br /><br />film &amp; cast") == "Great film & cast"


def test_sentence_slices_are_one_or_two_consecutive_sentences_of_their_text():
    texts = ["One. Two! Three? Four.", "A single sentence without an end", ""]
    slices = sentence_slices(texts, count=3, seed=7)
    assert len(slices) == 9
    sentences = ["One.", "Two!", "Three?", "Four."]
    for piece in slices[0::3]:
        words = piece.split(" ")
        assert 1 <= len(words) <= 2 and " ".join(words) in " ".join(sentences)
    assert slices[1::3] == [texts[1]] * 3 and slices[2::3] == [""] * 3
    assert sentence_slices(texts, 3, seed=7) == slices  # seeded


def test_slices_from_the_end_are_a_texts_last_one_or_two_sentences():
    texts = ["One. Two! Three? Four.", "Alone."]
    slices = sentence_slices(texts, count=4, seed=3, place="end")
    assert set(slices[0::2]) == {"Four.", "Three? Four."}  # both lengths drawn, seeded
    assert slices[1::2] == ["Alone."] * 4
    assert sentence_slices(texts, 4, seed=3, place="end") == slices
