"""A sentiment run exported (the export step): size on disk, single-text latency, batch
throughput and accuracy on the 25,000 IMDB test reviews, Keras against each format's own
runtime, float32 and int8.

    python benchmarks/export.py --imdb-path ../shared/data/aclImdb_v1.tar.gz [--run-id ID]

Without `--run-id`: the latest run of `--model` (default bow) in the store, trained
first with the lesson's defaults if there is none. Every text is preprocessed once (the
preprocessor is the same Keras layer for every format: its time is reported apart);
the formats answer the same arrays, made batch by batch outside the timing. Latency:
the median of `--single` calls on one review; throughput: every test review in
batches of `--batch-size`, the model's time alone.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).with_name("results") / "export.json"
VARIANTS = [("onnx", "none"), ("onnx", "int8"), ("saved_model", "none"),
            ("saved_model", "int8"), ("litert", "none"), ("litert", "int8")]


def timed(answer, chunks, single):
    """(seconds answering every chunk, median seconds answering one text, the answers);
    `chunks()` yields the arrays of each batch (made outside the timing)."""
    import numpy as np

    seconds, answers, first = 0.0, [], None
    for arrays in chunks():
        first = first or {name: array[:1] for name, array in arrays.items()}
        started = time.perf_counter()
        answers.append(answer(arrays))
        seconds += time.perf_counter() - started
    answer(first)  # warm
    latencies = []
    for _ in range(single):
        began = time.perf_counter()
        answer(first)
        latencies.append(time.perf_counter() - began)
    return seconds, statistics.median(latencies), np.concatenate(answers)


def measured(run, prepared, args):
    """A row per variant (Keras first): size, latency, throughput, accuracy; and the
    seconds the preprocessor took (once) to make every test review's arrays."""
    import keras

    from workflows.core import export, models
    from workflows.sentiment import exported

    texts, labels = prepared.texts("test"), prepared.labels("test")
    spent = []

    def chunks_for(model, names=None):
        def chunks():
            for start in range(0, len(texts), args.batch_size):
                began = time.perf_counter()
                arrays = exported.as_arrays(preprocessor.encode(
                    texts[start:start + args.batch_size]), model)
                spent.append(time.perf_counter() - began)
                yield export.named_arrays(arrays, names) if names else \
                    (arrays if isinstance(arrays, dict) else {"inputs": arrays})
        return chunks

    with models.verified_model(run) as local:
        folder = exported.classifier_folder(local)
        base = exported.exportable(run, folder)
        preprocessor = exported.load_classifier(folder).preprocessor

        def keras_answer(arrays):
            return keras.ops.convert_to_numpy(base.model.predict_on_batch(
                arrays if len(arrays) > 1 else next(iter(arrays.values()))))

        rows = [row_of("keras", "none", export.folder_size(folder / "model.keras"),
                       *timed(keras_answer, chunks_for(base.model), args.single), labels)]
        preprocess_seconds = sum(spent)
        with tempfile.TemporaryDirectory() as out:
            for format, quantize in VARIANTS:
                written = export.export_run(exported.exportable(run, folder), run.info.run_id,
                                            format, quantize, Path(out))
                answer, names = export.load_export(written)
                size = export.folder_size(written / export.FORMATS[format][1])
                rows.append(row_of(format, quantize, size, *timed(
                    answer, chunks_for(base.model, names), args.single), labels))
    for row in rows:
        row["accuracy_delta"] = round(row["accuracy"] - rows[0]["accuracy"], 5)
    return rows, preprocess_seconds, len(texts)


def row_of(format, quantize, size, seconds, latency, answers, labels):
    import numpy as np

    return {"format": format, "quantize": quantize, "size_mb": round(size / 1e6, 3),
            "single_text_ms": round(latency * 1e3, 3),
            "texts_per_second": round(len(labels) / seconds, 1),
            "accuracy": round(float(np.mean(np.argmax(answers, axis=1) == labels)), 5)}


def main(argv=None):
    from data_prep import imdb

    parser = argparse.ArgumentParser(prog="python benchmarks/export.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument(imdb.ACL_IMDB.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--run-id")
    parser.add_argument("--model", default="bow")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--single", type=int, default=200, help="one-text calls timed")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    from process.commands import import_backend

    import_backend()
    from reporting import machine, write_results

    from workflows import imdb_sentiment as workflow
    from workflows.core import runs
    from workflows.sentiment.sources import source_of_run

    try:
        run = runs.model_run(workflow.LESSON, args.run_id, params=None if args.run_id
                             else {"model": args.model})
    except runs.RunNotFoundError:
        if args.run_id:
            raise
        workflow.main(["train", "--model", args.model, *(
            [imdb.ACL_IMDB.flag, args.imdb_path] if args.imdb_path else [])])
        run = runs.model_run(workflow.LESSON, params={"model": args.model})
    config = runs.config_of(workflow.LESSON, run)
    source = source_of_run(run, args.imdb_path)
    prepared = workflow.trained_on(run, source, config, args.work_dir)
    rows, preprocess_seconds, count = measured(run, prepared, args)
    write_results({"machine": machine(), "run_id": run.info.run_id,
                   "model": run.data.params.get("model"), "test_texts": count,
                   "preprocess_seconds": round(preprocess_seconds, 2),
                   "batch_size": args.batch_size, "rows": rows}, args.output)


if __name__ == "__main__":
    main()
