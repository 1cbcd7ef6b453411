"""The IMDB reader normalizes each review as every reader of the kit does: a review file
with Windows-1252 mojibake, a line separator or a control character is read as the
same text a user's file of it would give."""

from data_prep.imdb import read_reviews
from data_prep.text import clean_html, normalize_text


def test_imdb_reviews_are_read_normalized(tmp_path):
    raw = {"pos": "Loved it \x96 truly<br />great\x85", "neg": "Dull\u2028film\x0bso bad"}
    for name, text in raw.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "0_1.txt").write_text(text, encoding="utf-8")
    texts, labels, skipped = read_reviews(tmp_path)
    assert texts == [clean_html(normalize_text(raw["neg"])), clean_html(normalize_text(raw["pos"]))]
    assert texts[1] == "Loved it – truly great…" and all(t.splitlines() == [t] for t in texts)
    assert labels.tolist() == [0, 1] and skipped == 0
