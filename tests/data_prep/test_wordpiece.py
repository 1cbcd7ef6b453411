"""WordPiece through Hugging Face `tokenizers` gives the ids of the plain-Python
tokenizer it replaced (frozen below, computed with it), cased and uncased."""

import pytest

from data_prep.text import WordPiece

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "film", "was", "great", "##ly", "bad",
              "cafe", "café", "naive", "un", "##want", "##ed", ",", ".", "!", "?", "'", "s",
              "don", "t", "1", "##2", "½", "1⁄2", "full", "width", "日", "本", "語", "-", "—",
              "(", ")", "a", "b", "c", "x", "##y", "##z", "<", ">", "br", "/"]
TEXTS = ["The film was GREATLY bad!", "Café naïve ﬁlm", "Ｆｕｌｌ－ｗｉｄｔｈ…", "½ and 1½",
         "un\u200bwanted\u00ad", "a\x97b\x00c\ufffd", "日本語 film", "don't (was) <br />the",
         "xyz\tx\ny\r\nz", "a" * 100, "a" * 101, "THE  FILM\u3000WAS", "éÉèÈ", "¿was?"]
UNCASED = [[4, 5, 6, 7, 8, 9, 18], [10, 12, 5], [28, 33, 29, 17, 17, 17], [27, 1, 1],
           [13, 14, 15], [37, 38, 39], [30, 31, 32, 5],
           [22, 20, 23, 35, 6, 36, 43, 45, 46, 44, 4], [40, 41, 42, 40, 1, 1], [1], [1],
           [4, 5, 6], [1], [1, 6, 19]]
CASED = [[1, 5, 6, 1, 9, 18], [1, 1, 1], [1, 1, 1, 1], [26, 1, 1], [13, 14, 15], [37, 38, 39],
         [30, 31, 32, 5], [22, 20, 23, 35, 6, 36, 43, 45, 46, 44, 4], [40, 41, 42, 40, 1, 1],
         [1], [1], [1, 1, 1], [1], [1, 6, 19]]


@pytest.mark.parametrize("lowercase, expected", [(True, UNCASED), (False, CASED)])
def test_the_ids_of_the_tokenizer_it_replaced(lowercase, expected):
    tokenizer = WordPiece(VOCABULARY, lowercase)
    assert tokenizer(TEXTS) == expected
    assert [tokenizer.encode(text) for text in TEXTS] == expected
