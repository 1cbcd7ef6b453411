"""A user's labelled texts: reading any labels, the grouped stratified split, the cache
and the one-line refusals of bad files."""

import json

import numpy as np
import pytest

from data_prep import text_classes
from data_prep.imdb import ReviewVectorizer
from data_prep.labelled_texts import LabelledTextsError, read_classes
from data_prep.text_classes import TextsFiles, grouped_split

# Generated news in two scripts, with accents: each class has words of its own
WORDS = {"negativo": ["pésimo", "ужасно", "кризис"], "neutral": ["reunión", "отчёт", "según"],
         "positivo": ["éxito", "радость", "alegría"]}
FILLER = ["el", "gobierno", "правительство", "año", "город", "на"]


def news(count=90, seed=0):
    """`count` (text, label) rows, neutral over half of them."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        label = rng.choice(list(WORDS), p=[0.2, 0.6, 0.2])
        words = list(rng.choice(FILLER, 6)) + list(rng.choice(WORDS[label], 2))
        rows.append((" ".join(words).capitalize() + f" {i}!", str(label)))
    return rows


def write_tsv(path, rows, header="text\tlabel"):
    path.write_text("\n".join([header, *(f"{t}\t{l}" for t, l in rows)]) + "\n",
                    encoding="utf-8")
    return path


def test_any_labels_are_read_from_tsv_csv_and_json_lines_alike(tmp_path):
    rows = [("Crece la economía", "positivo"), ("Сильный кризис", "negativo"),
            ('Informe "anual"', "neutral")]
    tsv = write_tsv(tmp_path / "news.tsv", rows)
    csv = tmp_path / "news.csv"
    csv.write_text("id,titular,sentimiento\n" + "".join(
        f'{i},"{t.replace(chr(34), chr(34) * 2)}",{l}\n' for i, (t, l) in enumerate(rows)),
        encoding="utf-8")
    jsonl = tmp_path / "news.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "category": l}, ensure_ascii=False) + "\n"
                             for t, l in rows), encoding="utf-8")
    expected = ([t for t, _ in rows], [l for _, l in rows])
    assert read_classes(tsv) == expected
    assert read_classes(csv, "titular", "sentimiento") == expected
    assert read_classes(jsonl) == expected


@pytest.mark.parametrize("content, suffix, message", [
    ("text\tlabel\n\tneutral\n", ".tsv", "line 2: the text is empty"),
    ("text\tlabel\nBien\t \n", ".tsv", "line 2: the label is empty"),
    ("titular,otra\nBien,1\n", ".csv", "has no text column"),
    ('{"text": "Bien"}\n', ".jsonl", "no 'label' column|has no label column"),
    ('{"text": "Bien", "label": "a"}\nnot json\n', ".jsonl", "line 2: not JSON"),
    ("\0\1\2binary", ".tsv", "is a binary file"),
])
def test_a_bad_file_is_one_line_naming_what_is_wrong(tmp_path, content, suffix, message):
    path = tmp_path / f"texts{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LabelledTextsError, match=message):
        read_classes(path)


def test_a_label_column_that_holds_texts_is_refused(tmp_path):
    rows = [(f"{i}", f"a different sentence number {i}") for i in range(120)]
    path = tmp_path / "swapped.tsv"
    path.write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    with pytest.raises(LabelledTextsError, match="more like texts than classes"):
        read_classes(path)


def test_the_split_is_stratified_seeded_and_keeps_every_copy_of_a_text_together():
    rows = news(200)
    texts = [t for t, _ in rows] + [rows[0][0]] * 5  # a text with five more copies
    labels = [l for _, l in rows] + [rows[0][1]] * 5
    split = grouped_split(texts, labels, {"val": 0.1, "test": 0.1}, seed=3)
    again = grouped_split(texts, labels, {"val": 0.1, "test": 0.1}, seed=3)
    assert all(np.array_equal(split[name], again[name]) for name in split)
    assert sorted(np.concatenate(list(split.values()))) == list(range(len(texts)))
    where = {name for name, rows_ in split.items() for i in rows_ if texts[i] == rows[0][0]}
    assert len(where) == 1
    for label in WORDS:  # each class in each split, near its share
        count = labels.count(label)
        for name, share in (("val", 0.1), ("test", 0.1)):
            held = sum(labels[i] == label for i in split[name])
            assert held >= 1 and abs(held - share * count) <= 6


def test_a_class_of_two_texts_is_trained_and_validated_on(tmp_path):
    labels = ["a"] * 20 + ["b"] * 2
    split = grouped_split([f"t{i}" for i in range(22)], labels, {"val": 0.1, "test": 0.1}, 0)
    assert [sum(labels[i] == "b" for i in split[name]) for name in ("train", "val", "test")] \
        == [1, 1, 0]


@pytest.mark.parametrize("rows, message", [
    ([("uno", "a"), ("dos", "a"), ("tres", "a")], "every text has the label 'a'"),
    ([("uno", "a"), ("dos", "a"), ("tres", "b")], "class 'b' has 1 text"),
    ([("review", "rating"), ("uno", "a"), ("dos", "a"), ("tres", "b"), ("cuatro", "b")],
     "class 'rating' has 1 text.* the first line's: .* --label-column"),  # a header unnamed
    ([("uno", "a"), ("uno", "a"), ("uno", "b"), ("uno", "b")],  # one text, copied
     "too few different texts .* \\(1 different in 4 rows.* --validation-texts"),
])
def test_one_class_or_a_class_of_one_text_is_refused_before_anything_is_written(
        tmp_path, rows, message):
    path = write_tsv(tmp_path / "few.tsv", rows)
    with pytest.raises(LabelledTextsError, match=message):
        text_classes.prepare(TextsFiles(str(path)), root=tmp_path / "work")
    assert not list((tmp_path / "work").glob("prepared/texts-*"))


def test_prepared_texts_keep_accents_and_scripts_and_are_cached_by_content(tmp_path):
    path = write_tsv(tmp_path / "news.tsv", news())
    prepared = text_classes.prepare(TextsFiles(str(path)), root=tmp_path / "work",
                                    verbose=False)
    assert prepared.classes == ["negativo", "neutral", "positivo"]
    assert {"éxito", "радость", "правительство", "reunión"} <= set(prepared.vocabulary())
    counts = prepared.summary["counts"]
    assert sum(counts.values()) == 90 and counts["val"] >= 3 and counts["test"] >= 3
    vectorizer = ReviewVectorizer(prepared.vocabulary(), prepared.settings.sequence_length,
                                  "any_language")
    assert np.array_equal(vectorizer(prepared.texts("test")), prepared.token_ids("test"))
    again = text_classes.prepare(TextsFiles(str(path)), root=tmp_path / "work", verbose=False)
    assert again.directory == prepared.directory
    write_tsv(path, news(seed=1))  # an edited file is prepared again
    assert text_classes.prepare(TextsFiles(str(path)), root=tmp_path / "work",
                                verbose=False).directory != prepared.directory


def test_given_validation_and_test_files_are_used_as_they_are(tmp_path):
    rows = news(120)
    files = TextsFiles(str(write_tsv(tmp_path / "train.tsv", rows[:80])),
                       str(write_tsv(tmp_path / "val.tsv", rows[80:100])),
                       str(write_tsv(tmp_path / "test.tsv", rows[100:])))
    prepared = text_classes.prepare(files, root=tmp_path / "work", verbose=False)
    assert prepared.texts("test") == [t for t, _ in rows[100:]]
    assert prepared.summary["counts"] == {"train": 80, "val": 20, "test": 20}
    unknown = write_tsv(tmp_path / "odd.tsv", [("Nada", "otro")])
    with pytest.raises(LabelledTextsError, match="labels the training texts lack"):
        text_classes.prepare(TextsFiles(files.texts, test=str(unknown)),
                             root=tmp_path / "work")


def test_word2vec_on_a_user_s_texts_splits_them_as_their_vocabulary_does(tmp_path):
    from data_prep import word2vec

    rows = [(f"«{text}»", label) for text, label in news(200)]
    path = write_tsv(tmp_path / "news.tsv", rows)
    prepared = text_classes.prepare(TextsFiles(str(path)), root=tmp_path / "work",
                                    verbose=False)
    vectors = word2vec.load_or_train(prepared, epochs=1)
    words = set(vectors.index_to_key)
    assert {"радость", "éxito", "правительство"} <= words
    assert words <= set(prepared.vocabulary())  # «, », ! and capitals never in a word
