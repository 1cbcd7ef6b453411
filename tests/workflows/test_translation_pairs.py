"""`--pairs FILE --languages A-B`: the translation lesson on a user's parallel corpus of
another language pair, here generated English-Russian sentences (Cyrillic): each
accepted format gives the same pairs, bad corpora are one line, and (integration) the
lesson runs prepare, train, evaluate and translate on it end to end."""

import csv
import zipfile

import mlflow
import pytest

from data_prep import parallel
from tests.workflows.test_translation import TINY_TRANSFORMER
from workflows import translation as workflow

NOUNS = {"cat": "кошка", "dog": "собака", "house": "дом", "city": "город", "book": "книга",
         "river": "река", "tree": "дерево", "car": "машина"}
ADJECTIVES = {"big": "большой", "small": "маленький", "old": "старый", "new": "новый",
              "red": "красный", "good": "хороший"}


def english_russian():
    pairs = []
    for noun, russian in NOUNS.items():
        for adjective, prilagatelnoe in ADJECTIVES.items():
            pairs.append((f"The {noun} is {adjective}.", f"{russian.capitalize()} "
                          f"{prilagatelnoe}."))
        pairs.append((f"Where is the {noun}?", f"Где {russian}?"))
        pairs.append((f"I see the {noun}.", f"Я вижу: {russian}."))
    return pairs


def write_formats(folder, pairs):
    """The same pairs as an Anki .zip, a .txt, a .tsv, a .csv and two aligned files."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{first}\t{second}\tCC-BY 2.0 (France) Attribution: tatoeba.org\n"
                    for first, second in pairs)
    (folder / "rus.txt").write_text(lines, "utf-8")
    with zipfile.ZipFile(folder / "rus-eng.zip", "w") as archive:
        archive.writestr("rus.txt", lines)
        archive.writestr("_about.txt", "About the pairs")
    (folder / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs), "utf-8")
    with open(folder / "pairs.csv", "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows(pairs)
    (folder / "train.en").write_text("\n".join(a for a, _ in pairs) + "\n", "utf-8")
    (folder / "train.ru").write_text("\n".join(b for _, b in pairs) + "\n", "utf-8")
    return {"zip": [folder / "rus-eng.zip"], "txt": [folder / "rus.txt"],
            "tsv": [folder / "pairs.tsv"], "csv": [folder / "pairs.csv"],
            "aligned": [folder / "train.en", folder / "train.ru"]}


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    return write_formats(tmp_path_factory.mktemp("pairs"), english_russian())


@pytest.mark.parametrize("kind", ["zip", "txt", "tsv", "csv", "aligned"])
def test_every_format_gives_the_same_pairs(corpus_files, kind):
    corpus = parallel.ParallelCorpus.of([str(p) for p in corpus_files[kind]], "en-ru")
    assert corpus.read() == english_russian()


@pytest.mark.parametrize("write, languages, message", [
    (lambda f: f.write_text("The cat.\tКошка.\nno tab here\n", "utf-8"), "en-ru",
     "pairs.tsv:2: no tab between the two sentences"),
    (lambda f: f.write_text("The cat.\t \n", "utf-8"), "en-ru", "pairs.tsv:1: an empty side"),
    (lambda f: f.write_bytes("The cat.\tКошка.\n".encode("cp1251")), "en-ru", "not UTF-8"),
    (lambda f: f.write_bytes(b"\x89PNG\r\n\x1a\n\0\0"), "en-ru", "a binary file"),
    (lambda f: f.write_text("The cat.\tКошка.\n", "utf-8"), "en-en",
     "names the same language twice"),
    (lambda f: f.write_text("The cat.\tКошка.\n", "utf-8"), "english-russian",
     "two language codes joined by a dash"),
    (lambda f: f.write_text("The cat.\tКошка.\n" * 3, "utf-8"), "en-ru", "too few"),
])
def test_a_bad_corpus_is_one_line_and_exit_2(isolated_store, tmp_path, capsys, write,
                                             languages, message):
    path = tmp_path / "pairs.tsv"
    write(path)
    assert workflow.main(["prepare", "--pairs", str(path), "--languages", languages]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1 and "Traceback" not in error


def test_a_direction_of_other_languages_and_a_file_in_no_format_are_refused(
        isolated_store, corpus_files, tmp_path, capsys):
    tsv = str(corpus_files["tsv"][0])
    assert workflow.main(["train", "--pairs", tsv, "--languages", "en-ru",
                          "--direction", "en-es"]) == 2
    assert "not a direction of the en-ru pairs.tsv pairs: give --direction en-ru or ru-en" \
        in capsys.readouterr().err
    odd = tmp_path / "pairs.json"
    odd.write_text("{}")
    assert workflow.main(["prepare", "--pairs", str(odd), "--languages", "en-ru"]) == 2
    assert "not a .zip, .txt, .tsv or .csv" in capsys.readouterr().err
    assert workflow.main(["prepare", "--pairs", tsv]) == 2
    assert "--pairs needs --languages" in capsys.readouterr().err


@pytest.mark.integration
def test_a_russian_english_corpus_runs_end_to_end_both_ways(isolated_store, corpus_files,
                                                           capsys):
    pairs = ["--pairs", str(corpus_files["zip"][0]), "--languages", "en-ru"]
    assert workflow.main(["prepare", *pairs]) == 0
    assert "en-ru wordpiece" in capsys.readouterr().out
    tiny = [*TINY_TRANSFORMER, "--preset", "cpu", "--set", "bleu_sentences=4"]
    assert workflow.main(["train", *pairs, *tiny]) == 0
    assert workflow.main(["train", *pairs, "--direction", "ru-en", *tiny]) == 0
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time ASC"])
    assert [run.data.params["direction"] for run in runs] == ["en-ru", "ru-en"]
    assert all(run.data.params["languages"] == "en-ru" for run in runs)
    assert runs[0].data.tags["corpus"] == "en-ru rus-eng.zip"
    names = {given.dataset.name for given in runs[1].inputs.dataset_inputs}
    assert names == {"en-ru rus-eng.zip ru-en train", "en-ru rus-eng.zip ru-en val"}
    capsys.readouterr()
    results = workflow.evaluate(runs[0].info.run_id, limit=8)
    assert 0 <= results["test_beam4_bleu"] <= 100
    (output,) = workflow.translate(["Where is the cat?"], direction="ru-en")
    assert isinstance(output, str)
    (output,) = workflow.translate(["Where is the cat?"], direction="en-ru")
    assert isinstance(output, str) and not any("a" <= c <= "z" for c in output.lower()) \
        or output == ""  # Cyrillic (or nothing, from so tiny a model)
    rows = workflow.compare(direction="ru-en")
    assert len(rows) == 1
