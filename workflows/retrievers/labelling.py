"""Batch labelling at scale: every line of a file with its top k documents, as an Apache
Beam pipeline (the e-commerce system labelled its 600,000 products this way).

The file is read once, as a stream, to check it (UTF-8, no blank line) and to note
where each chunk of `CHUNK` lines starts; the pipeline carries only those offsets, and
each worker reads its own chunk's lines from the file. So memory does not grow with
the number of queries. Each worker loads the retriever once (`DoFn.setup`) and writes
each finished chunk as its own file (`<output>.parts/`, renamed into place when
complete). When every chunk is there, they are joined in input order into `--output`
(JSON lines: `{"line", "query", "results": [{"rank", "id", "title", "score"}]}`).
A stopped run keeps its finished chunks: the same command carries on from them. The
parts are keyed by everything that decides their lines (`labelling.json`: the queries'
SHA-256, `k`, the run whose retriever labels them, the chunk size and the output's
format): a rerun that differs in any of them is refused in one line, never mixed in.

Locally the DirectRunner runs the chunks on `workers` processes. On a Dask cluster
(`runner="dask"`, Beam's DaskRunner: one machine or many, its scheduler's `address`;
without one, a cluster of `workers` processes on this machine's loopback, no dashboard)
each chunk is one task; the retriever is copied beside the parts, and the file of
queries and the output must be on storage every worker reaches, at the same path. Each
worker process loads the retriever once, whatever the number of chunks it labels.
"""

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from tqdm import tqdm

from process.errors import UserError
from process.stops import ForcedStop, Stop

# Beam warns at import that Google Cloud's optional clients are absent: not this lesson's
_root_level = logging.getLogger().level
logging.getLogger().setLevel(logging.ERROR)
try:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
finally:
    logging.getLogger().setLevel(_root_level)

CHUNK = 256
KEY_FILE = "labelling.json"  # in the parts folder: what its chunks were labelled with
FORMAT = 1  # the output lines' format: parts of another format are never joined
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DASK_CONNECT_SECONDS = 10  # a scheduler that does not answer in this time is an error
_searchers = {}  # retriever folder -> its `Searcher`, loaded once per worker process


class LabelChunk(beam.DoFn):
    """Labels one chunk `(start, offset, count)` of the queries file (its lines from
    `start`, at byte `offset`) and writes it as `<parts>/<start>.jsonl`."""

    def __init__(self, retriever_folder, queries_path, parts, k):
        self.retriever_folder, self.queries_path = str(retriever_folder), str(queries_path)
        self.parts, self.k = str(parts), k

    def setup(self):  # (per bundle on Dask: the process's loaded retriever is reused)
        from workflows.retrievers.searcher import Searcher

        if self.retriever_folder not in _searchers:
            _searchers[self.retriever_folder] = Searcher.load(self.retriever_folder)
        self.searcher = _searchers[self.retriever_folder]

    def process(self, chunk):
        start, offset, count = chunk
        queries = read_lines(self.queries_path, offset, count)
        answers = self.searcher.answers(queries, self.k)
        target = Path(self.parts) / f"{start:012d}.jsonl"
        partial = target.with_name(f".partial-{os.getpid()}-{target.name}")
        with open(partial, "w", encoding="utf-8") as file:
            for number, (query, results) in enumerate(zip(queries, answers, strict=True),
                                                      start + 1):
                file.write(json.dumps({"line": number, "query": query, "results": results},
                                      ensure_ascii=False) + "\n")
        os.replace(partial, target)
        yield start


def read_lines(path, offset, count):
    """`count` lines of `path` from byte `offset`, without their line ends."""
    with open(path, "rb") as file:
        file.seek(offset)
        return [file.readline().decode("utf-8").rstrip("\r\n") for _ in range(count)]


class QueryFile:
    """A file of queries, one per line, checked as it streams: `chunks` are the
    `(first line index, byte offset, lines)` of each run of `CHUNK` lines, `lines` their
    number, `sha256` the file's digest."""

    def __init__(self, path, chunk=None):
        chunk = chunk or CHUNK
        self.path, self.chunks, self.lines, self.chunk = Path(path), [], 0, chunk
        digest = hashlib.sha256()
        try:
            with open(self.path, "rb") as file:
                offset = 0
                for raw in file:
                    self._check(raw)
                    if self.lines % chunk == 0:
                        self.chunks.append([self.lines, offset, 0])
                    self.chunks[-1][2] += 1
                    self.lines += 1
                    offset += len(raw)
                    digest.update(raw)
        except FileNotFoundError:
            raise UserError(f"--file {path} does not exist.") from None
        except IsADirectoryError:
            raise UserError(f"--file {path} is a folder; give a file of queries.") from None
        except OSError as error:
            raise UserError(f"Cannot read --file {path}: {error.strerror}.") from None
        if not self.lines:
            raise UserError(f"--file {path} is empty: give one query per line.")
        self.chunks = [tuple(chunk) for chunk in self.chunks]
        self.sha256 = digest.hexdigest()

    def _check(self, raw):
        number = self.lines + 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(f"--file {self.path}, line {number}: not UTF-8 text (byte "
                            f"{error.start + 1} of the line); save it as UTF-8.") from None
        if not line.strip():
            raise UserError(f"--file {self.path}, line {number}: an empty query. Remove "
                            "blank lines (every line is labelled, in order).")


def parts_folder(output):
    """Where the chunks of `output` are written until it is joined."""
    output = Path(output).absolute()
    return output.with_name(output.name + ".parts")


def labelling_key(queries, k, run_id):
    """What decides the lines of a labelling, kept with its parts."""
    return {"queries_sha256": queries.sha256, "k": k, "run_id": run_id,
            "chunk": queries.chunk, "format": FORMAT}


def claim_parts(output, key):
    """The parts folder of `output` for the labelling `key`: a new one, or a stopped
    labelling's of the same key; one of another key (or of none) is refused in one line,
    so that no line of another labelling is ever joined in."""
    parts = parts_folder(output)
    if parts.is_dir() and any(parts.iterdir()):
        try:
            found = json.loads((parts / KEY_FILE).read_text())
        except (OSError, ValueError):
            found = {}
        if found != key:
            raise UserError(f"{parts} holds the labels of {_differences(found, key)}: remove "
                            "that folder to label anew (or give another --output).")
    parts.mkdir(parents=True, exist_ok=True)
    partial = parts / f".partial-{KEY_FILE}"
    partial.write_text(json.dumps(key))
    os.replace(partial, parts / KEY_FILE)
    return parts


def _differences(found, key):
    """What another labelling's parts were made with, in words."""
    if not found:
        return "an unknown labelling (no record of how it was made)"
    if found.get("queries_sha256") != key["queries_sha256"]:
        return "another version of --file"
    said = [f"{name} {found.get(name)!r} (now {key[name]!r})" for name in ("k", "run_id",
            "chunk", "format") if found.get(name) != key[name]]
    return "another labelling: " + ", ".join(said)


def label(retriever_folder, queries, output, k=10, workers=1, runner="DirectRunner",
          address=None, run_id=None):
    """Writes `output`: the lines of `queries` (a `QueryFile`) labelled with their top
    `k` by the retriever of run `run_id`, in order; resumable. `runner`: "DirectRunner"
    (on `workers` local processes), "dask" (the Dask scheduler at `address`, else a
    loopback cluster of `workers` processes) or another Beam runner. Returns the queries
    per second of this call's labelling."""
    output = Path(output).absolute()
    parts = claim_parts(output, labelling_key(queries, k, run_id))
    done = {int(p.stem) for p in parts.glob("[0-9]*.jsonl")}
    todo = [chunk for chunk in queries.chunks if chunk[0] not in done]
    if done:
        print(f"Resuming: {len(queries.chunks) - len(todo)} of {len(queries.chunks)} chunks "
              f"already labelled in {parts}")
    started = time.perf_counter()
    if todo:
        if runner != "DirectRunner":  # where every worker reads it
            retriever_folder = _shared_copy(retriever_folder, parts / "retriever")
        with _cluster(runner, address, workers) as address:
            options = _pipeline_options(runner, workers, address, len(todo))
            with _progress(parts, queries), _stop_stays_a_stop(parts, queries), \
                    _scheduler_reached(address):
                local = _direct_runner(options) if runner == "DirectRunner" else None
                with beam.Pipeline(runner=local, options=options) as pipeline:
                    _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
                         | beam.ParDo(LabelChunk(retriever_folder, queries.path.absolute(),
                                                 parts, k)))
    seconds = time.perf_counter() - started
    _join(parts, queries.chunks, output, runner)
    shutil.rmtree(parts)
    labelled = sum(count for _, _, count in todo)
    rate = labelled / seconds if seconds > 0 and labelled else 0.0
    print(f"Labelled {queries.lines:,} queries into {output}"
          + (f" ({labelled:,} now, {rate:.1f} queries/s with {workers} worker(s))"
             if labelled else ""))
    return rate


@contextlib.contextmanager
def _cluster(runner, address, workers):
    """The Dask scheduler's address: the one given, or a cluster of `workers` processes
    started here on the loopback interface, without a dashboard and its start-up logs
    (distributed's own default listens on every interface); None for other runners.
    While it runs, distributed's logs of a lost worker or scheduler are muted: the
    labelling says in one line what was lost and what to do."""
    if runner != "dask":
        yield address
        return
    distributed_log = logging.getLogger("distributed")
    level = distributed_log.level
    distributed_log.setLevel(logging.CRITICAL)
    try:
        if address:
            yield address
            return
        from distributed import LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          host="127.0.0.1", dashboard_address=None,
                          silence_logs=logging.CRITICAL) as cluster:
            yield cluster.scheduler_address
    finally:
        distributed_log.setLevel(level)


def _pipeline_options(runner, workers, address, chunks):
    """The pipeline's options (from `flags`, never this command's own arguments)."""
    if runner == "dask":  # a task per chunk: the cluster spreads them over its workers
        # whole seconds: Beam reads "10s" as no timeout given (distributed's 30 s)
        flags = [f"--dask_connection_timeout={DASK_CONNECT_SECONDS}",
                 f"--dask_npartitions={chunks}"]
        return PipelineOptions(flags=flags + ([f"--dask_client_address={address}"]
                                              if address else []), runner=DASK_RUNNER)
    return PipelineOptions(
        flags=[], runner=runner, direct_num_workers=workers,
        direct_running_mode="multi_processing" if workers > 1 else "in_memory",
        default_sdk_harness_log_level="WARNING")


def _direct_runner(options):
    """Beam's FnApiRunner, which the DirectRunner runs this pipeline on, without the
    DirectRunner's first try of Prism: a Go binary it downloads from GitHub on first
    use (or fails to, offline, leaving a temporary folder behind every run)."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


@contextlib.contextmanager
def _scheduler_reached(address):
    """A Dask scheduler that does not answer is one line saying so."""
    try:
        yield
    except OSError as error:
        if not address or "connect" not in str(error).lower():
            raise
        raise UserError(f"No Dask scheduler answers at {address}: start one there (dask "
                        "scheduler, then dask worker on each machine), or leave out "
                        "--dask-address for a cluster on this machine.") from None


def _shared_copy(folder, target):
    """`folder` copied to `target` (beside the parts, where every worker reads them; the
    parts' key names the run it is the retriever of)."""
    if not target.is_dir():
        partial = target.with_name(f".partial-{os.getpid()}-{target.name}")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            shutil.copytree(folder, partial)
            os.replace(partial, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


@contextlib.contextmanager
def _stop_stays_a_stop(parts, queries):
    """A stop ends the labelling as a stop (status 130, one line saying what is kept):
    Beam wraps what a step raises, a stop's KeyboardInterrupt included, in its own
    error."""
    def kept():
        return (f"{len(list(parts.glob('[0-9]*.jsonl')))} of {len(queries.chunks)} chunks "
                f"are labelled in {parts}; the same command goes on from there")

    kept_before, ForcedStop.kept = ForcedStop.kept, kept
    handlers = [*logging.getLogger().handlers, logging.lastResort]
    for handler in handlers:  # Beam logs the wrapped stop with its traceback
        handler.addFilter(_not_after_a_stop)
    try:
        yield
    except BaseException as error:
        if not (Stop.requested or isinstance(error, KeyboardInterrupt)):
            raise
        print(f"Interrupted: {kept()}", file=sys.stderr, flush=True)
        Stop.reported = True
        raise KeyboardInterrupt from None
    finally:
        ForcedStop.kept = kept_before
        for handler in handlers:
            handler.removeFilter(_not_after_a_stop)


def _not_after_a_stop(record):
    return not Stop.requested


def _join(parts, chunks, output, runner="DirectRunner"):
    missing = [start for start, *_ in chunks if not (parts / f"{start:012d}.jsonl").is_file()]
    if missing and runner == "dask":  # its scheduler or workers went away mid-run
        raise UserError(f"The Dask cluster stopped before {len(missing)} of {len(chunks)} "
                        f"chunks were labelled; the others are kept in {parts}: rerun the "
                        "same command once the scheduler and its workers are up.")
    if missing:
        raise RuntimeError(f"the pipeline finished without chunk(s) {missing[:5]}")
    partial = output.with_name(f".partial-{output.name}")
    with open(partial, "w", encoding="utf-8") as joined:
        for start, *_ in chunks:
            with open(parts / f"{start:012d}.jsonl", encoding="utf-8") as part:
                shutil.copyfileobj(part, joined)
    os.replace(partial, output)


class _progress:
    """Counts the labelled lines from the finished chunks while the pipeline runs."""

    def __init__(self, parts, queries):
        self.parts, self.stop = parts, threading.Event()
        self.lines = {start: count for start, _, count in queries.chunks}
        self.progress = tqdm(total=queries.lines, desc="Labelling", disable=None)
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _labelled(self):
        return sum(self.lines.get(int(p.stem), 0) for p in self.parts.glob("[0-9]*.jsonl"))

    def _watch(self):
        while not self.stop.wait(1.0):
            self.progress.update(self._labelled() - self.progress.n)

    def __enter__(self):
        self.progress.__enter__()
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop.set()
        self.thread.join()
        self.progress.update(self._labelled() - self.progress.n)
        self.progress.__exit__(*exc_info)
