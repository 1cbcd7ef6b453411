import pytest

from data_prep.labelled_texts import LabelledTextsError, read_labelled_texts


def read(tmp_path, content, suffix=".tsv", **columns):
    path = tmp_path / f"texts{suffix}"
    path.write_text(content, encoding="utf-8")
    texts, labels = read_labelled_texts(path, **columns)
    return texts, labels.tolist()


def test_text_tab_label_lines_split_at_the_last_tab(tmp_path):
    assert read(tmp_path, "\ufeffGreat\tpositive\r\n\nBad\tthings\tNEG\n") == (
        ["Great", "Bad things"], [1, 0])  # a tab inside a text is a space (normalize_text)


@pytest.mark.parametrize("content", [
    "sentence\tlabel\nGreat phone\t1\nWaste of money\t0\n",
    "Label\tText\n1\tGreat phone\n0\tWaste of money\n",
    "id\treview\tsentiment\n7\tGreat phone\tpos\n8\tWaste of money\tneg\n",
])
def test_a_tsv_header_line_names_the_columns(tmp_path, content):
    assert read(tmp_path, content) == (["Great phone", "Waste of money"], [1, 0])


def test_a_first_line_that_is_a_review_is_not_taken_for_a_header(tmp_path):
    content = "text\t1\nlabel\tneg\n"  # two reviews, however odd
    assert read(tmp_path, content) == (["text", "label"], [1, 0])


def test_tsv_columns_can_be_named(tmp_path):
    content = "body\tstars\tgood\nFine\t4\t1\nDull\t2\t0\n"
    assert read(tmp_path, content, text_column="body", label_column="good") == (
        ["Fine", "Dull"], [1, 0])
    with pytest.raises(LabelledTextsError, match="no column 'words'"):
        read(tmp_path, content, text_column="words", label_column="good")


def test_a_row_short_of_the_headers_fields_is_reported_with_its_line(tmp_path):
    with pytest.raises(LabelledTextsError, match="line 3: expected 3 tab-separated fields"):
        read(tmp_path, "id\ttext\tlabel\n1\tFine\t1\n2\tDull 0\n")
