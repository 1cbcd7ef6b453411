"""A user's parallel corpus for the translation lesson: any language pair, four formats.

    --pairs fra-eng.zip --languages en-fr          # a Tatoeba/Anki archive (English first)
    --pairs pairs.txt --languages en-fr            # its .txt: FIRST<TAB>SECOND[<TAB>...]
    --pairs pairs.tsv --languages de-en            # a two-column TSV, or a .csv
    --pairs train.de train.en --languages de-en    # two aligned files, one sentence a line

`--languages A-B` names the columns in order (ISO codes, two or three letters); the
lesson trains either direction (`--direction A-B`, the default, or `B-A`). Every line
must hold a pair: a line without a tab (or a CSV row without two fields), an empty side,
files of different lengths or a file in none of these formats is refused in one line
that names the line. `spa_eng.prepare` splits, learns and caches the pairs as it does
the tutorial's own, keyed by the files' contents.
"""

import csv
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from data_prep import cache
from data_prep.text import looks_binary, normalize_text, text_lines
from process.errors import UserError

LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")
LANGUAGE_NAMES = {"en": "English", "es": "Spanish", "fr": "French", "de": "German",
                  "it": "Italian", "pt": "Portuguese", "nl": "Dutch", "ru": "Russian",
                  "uk": "Ukrainian", "el": "Greek", "ar": "Arabic", "he": "Hebrew",
                  "hi": "Hindi", "ja": "Japanese", "zh": "Chinese", "ko": "Korean",
                  "tr": "Turkish", "pl": "Polish"}
TEXT_SUFFIXES = (".txt", ".tsv", ".csv")


class PairsError(UserError):
    """A parallel corpus that cannot be read as pairs."""


def language_name(code):
    return LANGUAGE_NAMES.get(code, code)


def parse_languages(value):
    """`"en-fr"` -> `("en", "fr")`; one line for anything else."""
    parts = str(value).lower().split("-")
    if len(parts) != 2 or not all(LANGUAGE_CODE.fullmatch(part) for part in parts):
        raise PairsError(f"--languages {value!r}: give two language codes joined by a dash, "
                         "the file's first column first (en-fr, de-en).")
    if parts[0] == parts[1]:
        raise PairsError(f"--languages {value!r} names the same language twice: a corpus "
                         "pairs two languages.")
    return tuple(parts)


@dataclass(frozen=True)
class ParallelCorpus:
    """The user's files (one, or two aligned ones) and the languages of their columns."""

    files: tuple
    languages: tuple

    @classmethod
    def of(cls, pairs, languages):
        """From the flags' values (None: the tutorial's spa-eng)."""
        if not pairs:
            if languages:
                raise PairsError("--languages names the columns of --pairs FILE: give both.")
            return None
        if not languages:
            raise PairsError("--pairs needs --languages A-B: the codes of its first and "
                             "second columns (en-fr).")
        files = tuple(str(Path(path).expanduser()) for path in pairs)
        if len(files) > 2:
            raise PairsError(f"--pairs takes one file of pairs or two aligned files, not "
                             f"{len(files)}.")
        for path in files:
            if not Path(path).is_file():
                raise PairsError(f"--pairs {path} is not a file.")
        return cls(files, parse_languages(languages))

    @property
    def name(self):
        return f"{'-'.join(self.languages)} {Path(self.files[0]).name}"

    def digest(self):
        return ":".join(cache.sha256_of(path)[:16] for path in self.files)

    def read(self):
        """Every pair, `(first, second)`, whitespace collapsed."""
        if len(self.files) == 2:
            return aligned_pairs(*self.files)
        path = Path(self.files[0])
        if zipfile.is_zipfile(path):
            name, data = anki_member(path)
            return delimited_pairs(data, f"{path}:{name}", "\t")
        if path.suffix.lower() not in TEXT_SUFFIXES:
            raise PairsError(f"--pairs {path}: not a .zip, .txt, .tsv or .csv file of pairs "
                             "(or give two aligned files).")
        return delimited_pairs(path.read_bytes(), path,
                               "," if path.suffix.lower() == ".csv" else "\t")


def anki_member(path):
    """The archive's one text file of pairs (a Tatoeba/Anki zip also holds `_about.txt`)."""
    with zipfile.ZipFile(path) as archive:
        members = [info for info in archive.infolist() if not info.is_dir()
                   and info.filename.lower().endswith(".txt")
                   and not Path(info.filename).name.startswith(("_", "."))]
        if len(members) != 1:
            raise PairsError(f"--pairs {path}: expected one .txt file of pairs in the archive, "
                             f"found {len(members)}.")
        return members[0].filename, archive.read(members[0])


def decoded(data, where):
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise PairsError(f"{where}:{line}: not UTF-8 text (byte {error.start + 1}); save the "
                         "file as UTF-8.") from None


def clean(text):
    """A sentence as the lesson keeps it: normalized (`normalize_text`), whitespace
    collapsed."""
    return " ".join(normalize_text(text).split())


def delimited_pairs(data, where, delimiter):
    """Pairs of the first two fields of each line (`\\t`) or CSV row (`,`)."""
    if looks_binary(data[:8192]):
        raise PairsError(f"{where}: a binary file, not text pairs.")
    text = decoded(data, where)
    rows = csv.reader(io.StringIO(text)) if delimiter == "," else \
        (line.split("\t") for line in text_lines(text))
    pairs = []
    for number, fields in enumerate(rows, start=1):
        if not any(field.strip() for field in fields):
            continue
        if len(fields) < 2:
            raise PairsError(f"{where}:{number}: no {'comma' if delimiter == ',' else 'tab'} "
                             "between the two sentences.")
        first, second = clean(fields[0]), clean(fields[1])
        if not first or not second:
            raise PairsError(f"{where}:{number}: an empty side; every line needs a sentence "
                             "in each language.")
        pairs.append((first, second))
    return pairs


def aligned_pairs(first_file, second_file):
    """Line n of one file with line n of the other."""
    sides = []
    for path in (first_file, second_file):
        data = Path(path).read_bytes()
        if looks_binary(data[:8192]):
            raise PairsError(f"{path}: a binary file, not sentences.")
        sides.append(text_lines(decoded(data, path)))  # U+2028 inside a sentence stays
    if len(sides[0]) != len(sides[1]):
        raise PairsError(f"{first_file} has {len(sides[0])} lines and {second_file} "
                         f"{len(sides[1])}: aligned files hold one sentence a line, the same "
                         "number each.")
    pairs = []
    for number, (first, second) in enumerate(zip(*sides, strict=True), start=1):
        first, second = clean(first), clean(second)
        if not first and not second:
            continue
        if not first or not second:
            raise PairsError(f"line {number} of {first_file if not first else second_file} "
                             "is empty but its pair is not.")
        pairs.append((first, second))
    return pairs


def add_pairs_arguments(parser):
    """The flags of a user's parallel corpus (`ParallelCorpus.of`)."""
    parser.add_argument("--pairs", nargs="+", metavar="FILE", help="your parallel corpus "
                        "instead of spa-eng: a Tatoeba/Anki .zip or .txt, a two-column .tsv "
                        "or .csv, or two aligned files (one sentence a line)")
    parser.add_argument("--languages", metavar="A-B", help="--pairs: the codes of its first "
                        "and second columns (en-fr); the default --direction is A-B")
