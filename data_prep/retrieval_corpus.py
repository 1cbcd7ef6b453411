"""Retrieval data: documents, queries and relevance judgements.

Two sources, one result (`RetrievalData`):

- a dataset in the BEIR layout (Thakur et al., 2021): `corpus.jsonl` (`_id`, `title`,
  `text`), `queries.jsonl` (`_id`, `text`), `qrels/<split>.tsv` (`query-id`,
  `corpus-id`, `score` under a header), as a zip or a folder. Found like the other
  datasets: `--beir-path` or `NLPKIT_BEIR_PATH`, else the cached copy, else the official
  SciFact download (checksum verified);
- a user's catalogue: documents from a JSONL or CSV file (an id, a title, a text, and
  any other columns, which become searchable text as `name: value`), queries and
  judgements from TSV files (`--documents`, `--queries`, `--judgements`,
  `--test-judgements`).

Validation queries are carved from the train judgements by a seeded split, so test
is never used to choose anything. Everything is checked before anything is cached: a
malformed line, a duplicate id, a judgement naming an unknown query or document, an
empty corpus or a file that is not UTF-8 is one `CorpusError` saying where.
"""

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_prep import cache, sources
from data_prep.text import text_lines
from process.errors import UserError

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/"
SCIFACT = sources.DatasetSource(
    name="scifact", archive_name="scifact.zip", url=BEIR_URL + "scifact.zip",
    # the official archive's SHA-256, as recorded by a public project that pins it;
    # BEIR publishes its MD5 (5f7d1de60b170fc8027bb7898e2efca1)
    sha256="536e14446a0ba56ed1398ab1055f39fe852686ecad24a6306c80c490fa8e0165",
    marker="scifact/corpus.jsonl", env_var="NLPKIT_BEIR_PATH", flag="--beir-path")
SPLITS = ("train", "validation", "test")
ID_COLUMNS = ("_id", "id")


class CorpusError(UserError):
    """A corpus, queries or judgements file that cannot be used as it is."""


@dataclass(frozen=True)
class CorpusSettings:
    validation_share: float = 0.2  # of the train queries, held out to choose settings
    seed: int = 1337


@dataclass(frozen=True)
class CorpusFiles:
    """A user's own files (paths); `documents` alone is enough to search."""

    documents: str
    queries: str | None = None
    judgements: str | None = None  # train judgements (validation is carved from them)
    test_judgements: str | None = None


@dataclass
class RetrievalData:
    """A prepared corpus: `doc_ids`, `titles`, `texts` (parallel lists), `queries`
    (id -> text) and `judgements` (split -> query id -> document id -> grade)."""

    directory: Path
    doc_ids: list
    titles: list
    texts: list
    queries: dict
    judgements: dict

    @property
    def fingerprint(self):
        return self.directory.name

    def searchable(self):
        """What a retriever reads of each document: its title and text."""
        return [f"{title} {text}".strip() for title, text in zip(self.titles, self.texts,
                                                                  strict=True)]

    def split(self, name):
        """`(query ids, query texts, judgements)` of a split, in a stable order."""
        judged = self.judgements.get(name, {})
        ids = sorted(judged)
        return ids, [self.queries[i] for i in ids], judged

    def queries_to_learn_from(self):
        """`(query ids, query texts)` of every query outside the validation and test
        splits, in a stable order: what a cold start may learn from (their texts only)."""
        held = {q for name in ("validation", "test") for q in self.judgements.get(name, {})}
        ids = sorted(set(self.queries) - held)
        return ids, [self.queries[i] for i in ids]

    def title_of(self):
        return dict(zip(self.doc_ids, self.titles, strict=True))


# ## Where the data comes from (command-line flags)


def add_corpus_file_arguments(parser):
    """The flags of a user's catalogue (beside `--beir-path`)."""
    parser.add_argument("--documents", help="your catalogue: a JSONL or CSV file of documents "
                        "(id, title, text, any attribute columns) instead of a BEIR dataset")
    parser.add_argument("--queries", help="with --documents: a TSV of id<TAB>query lines")
    parser.add_argument("--judgements", help="with --documents: train judgements, a TSV of "
                        "query-id<TAB>document-id<TAB>grade lines")
    parser.add_argument("--test-judgements", help="with --documents: test judgements")


DATA_FLAGS = ("beir_path", "documents", "queries", "judgements", "test_judgements")


def data_flags(given):
    """The data a run was built on (`{flag name: path}`, as given), as absolute paths
    (tags, for `evaluate`)."""
    given = {name: given.get(name) for name in DATA_FLAGS}
    given["beir_path"] = given["beir_path"] or os.environ.get(SCIFACT.env_var)
    return {f"data_{name}": str(Path(value).resolve()) for name, value in given.items()
            if value}


# ## Prepare


def prepare(path=None, catalogue=None, settings=CorpusSettings(), root=None, verbose=True):
    """The prepared corpus of a BEIR dataset (`path`, else the environment variable, the
    cache or the download) or of a `CorpusFiles`; built once, then reused."""
    if catalogue is not None:
        files = [catalogue.documents, catalogue.queries, catalogue.judgements,
                 catalogue.test_judgements]
        for file in filter(None, files):
            if not Path(file).is_file():
                raise CorpusError(f"{file} does not exist or is not a file.")
        source = [cache.source_digest(Path(f), root)[:16] if f else None for f in files]
        read = lambda: read_catalogue(catalogue)  # noqa: E731
        name = "retrieval-catalogue"
    else:
        folder = locate(path, root)
        source = cache.source_digest(folder, root)[:16]
        read = lambda: read_beir(folder)  # noqa: E731
        name = f"retrieval-{folder.name}"
    keyed = {"validation_share": settings.validation_share, "seed": settings.seed,
             "source": source}
    directory = cache.prepared_dir(name, keyed, root)
    if not cache.is_intact(directory):
        documents, queries, judgements = read()  # every check, before anything is written
        judgements = carve_validation(judgements, settings)
        cache.write_atomically(directory, keyed, lambda tmp: _write(
            tmp, documents, queries, judgements))
    data = load(directory)
    if verbose:
        counts = ", ".join(f"{len(data.judgements.get(s, {}))} {s}" for s in SPLITS)
        print(f"Corpus: {len(data.doc_ids):,} documents, {len(data.queries):,} queries "
              f"(judged: {counts}) in {directory}")
    return data


def locate(path=None, root=None):
    """The folder holding `corpus.jsonl` of the BEIR dataset at `path` (a zip or folder),
    else `$NLPKIT_BEIR_PATH`, else SciFact from the cache or the official download."""
    path = path or os.environ.get(SCIFACT.env_var)
    if not path:
        return sources.resolve(SCIFACT, None, root) / "scifact"
    path = Path(path).expanduser()
    if not path.exists():
        raise CorpusError(f"{path} does not exist. {SCIFACT.how_to_provide()}")
    if path.is_file():
        key = cache.source_digest(path, root)[:16]
        path = sources.extract(path, cache.work_dir(root) / "extracted" / f"beir-{key}")
    found = [path] if (path / "corpus.jsonl").is_file() else sorted(
        p.parent for p in path.glob("*/corpus.jsonl"))
    if len(found) != 1:
        raise CorpusError(f"{path} holds {'no' if not found else 'several'} BEIR dataset "
                          "(a folder with corpus.jsonl, queries.jsonl and qrels/*.tsv): "
                          "point at one dataset's folder or zip.")
    return found[0]


def load(directory):
    directory = Path(directory)
    documents = [record for _, record in _records_of_jsonl(directory / "documents.jsonl")]
    queries = {q["_id"]: q["text"] for _, q in _records_of_jsonl(directory / "queries.jsonl")}
    return RetrievalData(directory, [d["_id"] for d in documents],
                         [d["title"] for d in documents], [d["text"] for d in documents],
                         queries, json.loads((directory / "judgements.json").read_text()))


def _write(tmp, documents, queries, judgements):
    with open(tmp / "documents.jsonl", "w", encoding="utf-8") as file:
        for document in documents:
            file.write(json.dumps(document, ensure_ascii=False) + "\n")
    with open(tmp / "queries.jsonl", "w", encoding="utf-8") as file:
        for query_id, text in queries.items():
            file.write(json.dumps({"_id": query_id, "text": text}, ensure_ascii=False) + "\n")
    (tmp / "judgements.json").write_text(json.dumps(judgements))


def carve_validation(judgements, settings):
    """Moves a seeded `validation_share` of the train queries to a validation split (a
    dataset's own `dev` split is used as it is when it has one)."""
    judgements = dict(judgements)
    if "dev" in judgements:
        judgements["validation"] = judgements.pop("dev")
        return judgements
    train = judgements.get("train", {})
    ids = sorted(train)
    order = np.random.default_rng(settings.seed).permutation(len(ids))
    held = {ids[i] for i in order[:round(len(ids) * settings.validation_share)]}
    if held:
        judgements["validation"] = {q: train[q] for q in sorted(held)}
        judgements["train"] = {q: train[q] for q in ids if q not in held}
    return judgements


# ## Read and check


def read_beir(folder):
    """`(documents, queries, judgements)` of a BEIR-layout folder, checked."""
    documents = [_document(record, folder / "corpus.jsonl", line, ("title", "text"))
                 for line, record in _records_of_jsonl(folder / "corpus.jsonl")]
    queries = _query_texts(folder / "queries.jsonl")
    judgements = {path.stem: read_judgements(path)
                  for path in sorted((folder / "qrels").glob("*.tsv"))}
    return _checked(documents, queries, judgements)


def read_catalogue(catalogue):
    """`(documents, queries, judgements)` of a user's files, checked."""
    path = Path(catalogue.documents)
    if path.suffix.lower() == ".csv":
        rows = _records_of_csv(path)
    else:
        rows = _records_of_jsonl(path)
    documents = [_document(record, path, line, ("title", "text")) for line, record in rows]
    queries = read_query_tsv(Path(catalogue.queries)) if catalogue.queries else {}
    judgements = {split: read_judgements(Path(file)) for split, file in
                  (("train", catalogue.judgements), ("test", catalogue.test_judgements))
                  if file}
    if judgements and not queries:
        raise CorpusError("Judgements need their queries: give --queries too.")
    return _checked(documents, queries, judgements)


def _document(record, path, line, known):
    """One document: its id, title and text; other fields become `name: value` text."""
    if not isinstance(record, dict):
        raise CorpusError(f"{path}, line {line}: expected an object with an id, a title "
                          "and a text.")
    key = next((k for k in ID_COLUMNS if k in record), None)
    if key is None or str(record[key]).strip() == "":
        raise CorpusError(f"{path}, line {line}: no id (a field named _id or id).")
    attributes = [f"{name}: {value}" for name, value in record.items()
                  if name not in (*ID_COLUMNS, *known, "metadata")
                  and value not in (None, "")]
    text = " ".join([str(record.get("text") or ""), *attributes]).strip()
    return {"_id": str(record[key]).strip(), "title": str(record.get("title") or "").strip(),
            "text": text}


def _checked(documents, queries, judgements):
    if not documents:
        raise CorpusError("The corpus is empty: give at least one document.")
    if not any(d["title"] or d["text"] for d in documents):
        raise CorpusError("Every document of the corpus is empty (no title, no text).")
    _no_duplicates([d["_id"] for d in documents], "document")
    known = {d["_id"] for d in documents}
    for split, judged in judgements.items():
        unknown_queries = sorted(set(judged) - set(queries))
        unknown_documents = sorted({d for grades in judged.values() for d in grades} - known)
        if unknown_queries:
            raise CorpusError(f"The {split} judgements name {len(unknown_queries)} query id(s) "
                              f"the queries do not have, e.g. {unknown_queries[0]!r}.")
        if unknown_documents:
            raise CorpusError(f"The {split} judgements name {len(unknown_documents)} document "
                              f"id(s) the corpus does not have, e.g. {unknown_documents[0]!r}.")
    judgements = {split: {q: grades for q, grades in judged.items()
                          if any(g > 0 for g in grades.values())}
                  for split, judged in judgements.items()}
    return documents, queries, judgements


def _no_duplicates(ids, what):
    seen = set()
    for i in ids:
        if i in seen:
            raise CorpusError(f"The {what} id {i!r} appears twice: ids must be unique.")
        seen.add(i)


def _query_texts(path):
    queries = {}
    for line, record in _records_of_jsonl(path):
        if not isinstance(record, dict) or "_id" not in record or "text" not in record:
            raise CorpusError(f"{path}, line {line}: expected an object with _id and text.")
        query_id = str(record["_id"])
        if query_id in queries:
            raise CorpusError(f"The query id {query_id!r} appears twice ({path}, line {line}).")
        queries[query_id] = str(record["text"])
    return queries


def read_query_tsv(path):
    """Queries from a TSV file of `id<TAB>text` lines (a header line `id`/`query-id` is
    skipped)."""
    queries = {}
    for line, row in _rows_of_tsv(path):
        if len(row) < 2:
            raise CorpusError(f"{path}, line {line}: expected id<TAB>text.")
        if line == 1 and row[0].strip().lower() in ("id", "_id", "query-id", "query_id"):
            continue
        if row[0] in queries:
            raise CorpusError(f"The query id {row[0]!r} appears twice ({path}, line {line}).")
        queries[row[0].strip()] = row[1].strip()
    return queries


def read_judgements(path):
    """`{query id: {document id: grade}}` from a TSV of `query-id<TAB>corpus-id<TAB>score`
    lines (a header line is skipped; a missing score means 1)."""
    judged = {}
    for line, row in _rows_of_tsv(path):
        if len(row) < 2:
            raise CorpusError(f"{path}, line {line}: expected query-id<TAB>corpus-id<TAB>score.")
        try:
            grade = int(row[2]) if len(row) > 2 else 1
        except ValueError:
            if line == 1:  # the header
                continue
            raise CorpusError(f"{path}, line {line}: the score {row[2]!r} is not an "
                              "integer.") from None
        judged.setdefault(row[0].strip(), {})[row[1].strip()] = grade
    return judged


def _text_of(path):
    try:
        return Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = Path(path).read_bytes()[:error.start].count(b"\n") + 1
        raise CorpusError(f"{path}, line {line}: not UTF-8 (byte {error.start}); save the "
                          "file as UTF-8 and try again.") from None
    except OSError as error:
        raise CorpusError(f"Cannot read {path}: {error.strerror}.") from None


def _records_of_jsonl(path):
    for number, line in enumerate(text_lines(_text_of(path)), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusError(f"{path}, line {number}: not valid JSON ({error.msg}).") from None


CSV_FIELD_LIMIT = 2**31 - 1  # a long description is a document too (the csv default: 128 KB)


def _records_of_csv(path):
    reader = csv.DictReader(io.StringIO(_text_of(path)))
    default = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        for record in reader:
            if None in record:
                raise CorpusError(f"{path}, line {reader.line_num}: more fields than the "
                                  "header names.")
            yield reader.line_num, record
    except csv.Error as error:
        raise CorpusError(f"{path}, line {reader.line_num}: {error}.") from None
    finally:
        csv.field_size_limit(default)


def _rows_of_tsv(path):
    for number, line in enumerate(text_lines(_text_of(path)), start=1):
        if line.strip():
            yield number, line.split("\t")
