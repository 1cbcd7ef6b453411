"""Batch labelling at scale: every line of a file with its top k documents, as an Apache
Beam pipeline (the e-commerce system labelled its 600,000 products this way).

The file is cut into chunks of `CHUNK` lines; the pipeline hands the chunks not yet
done to its workers, each of which loads the retriever once (`DoFn.setup`) and writes
each finished chunk as its own file (`<output>.parts/`, renamed into place when
complete). When every chunk is there, they are joined in input order into `--output`
(JSON lines: `{"line", "query", "results": [{"rank", "id", "title", "score"}]}`).
A stopped run keeps its finished chunks: the same command carries on from them.

Locally the DirectRunner runs the chunks on `workers` processes. The same pipeline runs
on Dataflow, Flink or Spark (`--runner` and that runner's options), with the retriever
folder and the parts folder on storage every worker reaches.
"""

import json
import os
import shutil
import threading
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from tqdm import tqdm

from data_prep.commands import UserError

CHUNK = 256


class LabelChunk(beam.DoFn):
    """Labels one chunk `(start, queries)` and writes it as `<parts>/<start>.jsonl`."""

    def __init__(self, retriever_folder, parts, k):
        self.retriever_folder, self.parts, self.k = str(retriever_folder), str(parts), k

    def setup(self):
        from workflows.retrievers.searcher import Searcher

        self.searcher = Searcher.load(self.retriever_folder)

    def process(self, chunk):
        start, queries = chunk
        answers = self.searcher.answers(queries, self.k)
        target = Path(self.parts) / f"{start:012d}.jsonl"
        partial = target.with_name(f".partial-{os.getpid()}-{target.name}")
        with open(partial, "w", encoding="utf-8") as file:
            for offset, (query, results) in enumerate(zip(queries, answers, strict=True)):
                file.write(json.dumps({"line": start + offset + 1, "query": query,
                                       "results": results}, ensure_ascii=False) + "\n")
        os.replace(partial, target)
        yield start


def read_queries(path):
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError(f"--file {path} does not exist.") from None
    except UnicodeDecodeError as error:
        raise UserError(f"--file {path} is not UTF-8 text (byte {error.start}); save it as "
                        "UTF-8.") from None
    except OSError as error:
        raise UserError(f"Cannot read --file {path}: {error.strerror}.") from None
    blank = next((number for number, line in enumerate(lines, 1) if not line.strip()), None)
    if not lines:
        raise UserError(f"--file {path} is empty: give one query per line.")
    if blank:
        raise UserError(f"--file {path}, line {blank}: an empty query. Remove blank lines "
                        "(every line is labelled, in order).")
    return lines


def label(retriever_folder, queries, output, k=10, workers=1, runner="DirectRunner"):
    """Writes `output`: `queries` labelled with their top `k`, in order; resumable."""
    output = Path(output)
    parts = output.with_name(output.name + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    chunks = [(start, queries[start:start + CHUNK]) for start in range(0, len(queries), CHUNK)]
    done = {int(p.stem) for p in parts.glob("[0-9]*.jsonl")}
    todo = [chunk for chunk in chunks if chunk[0] not in done]
    if done:
        print(f"Resuming: {len(chunks) - len(todo)} of {len(chunks)} chunks already labelled "
              f"in {parts}")
    started = time.perf_counter()
    if todo:
        options = PipelineOptions(  # flags=[]: not this command's own arguments
            flags=[], runner=runner, direct_num_workers=workers,
            direct_running_mode="multi_processing" if workers > 1 else "in_memory",
            default_sdk_harness_log_level="WARNING")
        with _progress(parts, len(queries), len(done)):
            with beam.Pipeline(options=options) as pipeline:
                _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
                     | beam.ParDo(LabelChunk(retriever_folder, parts, k)))
    seconds = time.perf_counter() - started
    _join(parts, chunks, output)
    shutil.rmtree(parts)
    labelled = sum(len(queries) for _, queries in todo)
    rate = labelled / seconds if seconds > 0 and labelled else 0.0
    print(f"Labelled {len(queries):,} queries into {output}"
          + (f" ({labelled:,} now, {rate:.1f} queries/s with {workers} worker(s))"
             if labelled else ""))
    return rate


def _join(parts, chunks, output):
    missing = [start for start, _ in chunks if not (parts / f"{start:012d}.jsonl").is_file()]
    if missing:
        raise RuntimeError(f"the pipeline finished without chunk(s) {missing[:5]}")
    partial = output.with_name(f".partial-{output.name}")
    with open(partial, "w", encoding="utf-8") as joined:
        for start, _ in chunks:
            with open(parts / f"{start:012d}.jsonl", encoding="utf-8") as part:
                shutil.copyfileobj(part, joined)
    os.replace(partial, output)


class _progress:
    """Counts the labelled lines from the parts folder while the pipeline runs."""

    def __init__(self, parts, total, done_chunks):
        self.parts, self.stop = parts, threading.Event()
        self.progress = tqdm(total=total, desc="Labelling", disable=None)
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self.stop.wait(1.0):
            lines = sum(1 for p in self.parts.glob("[0-9]*.jsonl") for _ in open(p, "rb"))
            self.progress.update(lines - self.progress.n)

    def __enter__(self):
        self.progress.__enter__()
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop.set()
        self.thread.join()
        self.progress.update(sum(1 for p in self.parts.glob("[0-9]*.jsonl")
                                  for _ in open(p, "rb")) - self.progress.n)
        self.progress.__exit__(*exc_info)
