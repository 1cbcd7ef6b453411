"""A translator exported (the export step) and decoded greedily in each format's own
runtime, against the kit's greedy decoding: size on disk, one sentence's latency,
sentences per second and test BLEU, float32 and int8.

    python benchmarks/export_translation.py --spa-eng-path ../shared/data/spa-eng.zip
        [--run-id ID] [--sentences 2000] [--max-train-minutes 12]

Without `--run-id`: the latest run in the store, trained first if there is none
(`train --preset cpu --max-train-minutes M`). The export's greedy loop is the docs'
(`docs/export.md`): the whole network once per token, `[start]` then each chosen token
fed back, in batches of sentences of similar length padded with id 0; the kit's is
`Translator.translate(beam_width=1)` (cached keys and values). Both score the first
`--sentences` distinct test sources against all their references.
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).with_name("results") / "export_translation.json"
VARIANTS = [("onnx", "none"), ("onnx", "int8"), ("saved_model", "none"),
            ("saved_model", "int8"), ("litert", "none"), ("litert", "int8")]


def row_of(format, quantize, size, translate, sources, references, single_source):
    """Size, the median of 20 one-sentence translations, throughput and test scores."""
    from workflows.seq2seq.metrics import bleu_scores

    started = time.perf_counter()
    hypotheses = translate(sources)
    seconds = time.perf_counter() - started
    latencies = []
    for _ in range(20):
        began = time.perf_counter()
        translate([single_source])
        latencies.append(time.perf_counter() - began)
    scores = bleu_scores(hypotheses, references)
    return {"format": format, "quantize": quantize, "size_mb": round(size / 1e6, 3),
            "single_sentence_ms": round(statistics.median(latencies) * 1e3, 2),
            "sentences_per_second": round(len(sources) / seconds, 1),
            "bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2),
            "normalized_bleu": round(scores["normalized_bleu"], 2)}, hypotheses


def measured(run, translator, sources, references, args):
    """A row per variant, the kit's greedy decoding first."""

    from workflows.core import export, models
    from workflows.seq2seq import exported

    base, kit = row_of("keras (kit, cached)", "none", 0,
                       lambda texts: translator.translate(texts, beam_width=1),
                       sources, references, sources[0])
    rows = [base]
    with models.verified_model(run) as local, tempfile.TemporaryDirectory() as out:
        folder = local / "artifacts" / "translator"
        base["size_mb"] = round(export.folder_size(folder) / 1e6, 3)
        for format, quantize in VARIANTS:
            try:
                written = export.export_run(exported.exportable(run, folder), run.info.run_id,
                                            format, quantize, Path(out))
            except export.ExportFailedError as error:
                rows.append({"format": format, "quantize": quantize, "refused": str(error)})
                continue
            translate = exported.ExportedTranslator(written, translator).translate
            row, hypotheses = row_of(format, quantize, export.folder_size(
                written / export.FORMATS[format][1]), translate, sources, references,
                sources[0])
            row["same_as_kit"] = round(float(np.mean(
                [a == b for a, b in zip(hypotheses, kit, strict=True)])), 4)
            rows.append(row)
    for row in rows:
        if "bleu" in row:
            row["bleu_delta"] = round(row["bleu"] - base["bleu"], 2)
    return rows


def main(argv=None):
    from reporting import machine, translation_run_parser, write_results

    from data_prep import spa_eng

    parser = translation_run_parser("export_translation.py", __doc__.split("\n")[0])
    parser.add_argument("--max-train-minutes", type=float, default=12)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    from process.commands import import_backend

    import_backend()
    from workflows import translation as workflow
    from workflows.core import runs

    location = [spa_eng.SPA_ENG.flag, args.spa_eng_path] if args.spa_eng_path else []
    try:
        run, translator = workflow.load_run_translator(args.run_id, batch_size=args.batch_size)
    except runs.RunNotFoundError:
        if args.run_id:
            raise
        workflow.main(["train", "--preset", "cpu", "--max-train-minutes",
                       str(args.max_train_minutes), *location])
        run, translator = workflow.load_run_translator(batch_size=args.batch_size)
    config = runs.config_of(workflow.LESSON, run)
    _, sources, references = workflow.split_references(
        config, "test", args.spa_eng_path, args.work_dir, args.sentences,
        workflow.corpus_of(run.data.params))
    rows = measured(run, translator, sources, references, args)
    write_results({"machine": machine(), "run_id": run.info.run_id,
                   "model": f"{config.model} {config.preset}", "direction": config.direction,
                   "test_sentences": len(sources), "batch_size": args.batch_size,
                   "rows": rows}, args.output)


if __name__ == "__main__":
    main()
