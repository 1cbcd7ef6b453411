"""Decoding speed: the tutorial's re-run-everything loop against cached, batched decoding.

One trained translator (the latest `translation` run, or `--run-id`), four ways to
greedily translate the same test sentences:

- `tutorial_loop`: the book's `decode_sequence`, one sentence at a time; for every new
  token the whole model re-reads the source and the full padded target (an eager call,
  as in the book);
- `tutorial_loop_compiled`: the same loop through the compiled `predict_on_batch`, a
  stronger baseline that removes the eager-call overhead but still re-runs everything;
- `cached_one_by_one`: `Decoder` with cached keys/values, still one sentence at a time;
- `cached_batched`: the same, `--batch-size` sentences per call (what `translate` does).

Outputs are compared token by token with the (eager) tutorial loop's.

    python benchmarks/translation_decoding.py --spa-eng-path ../shared/data/spa-eng.zip

Writes `benchmarks/results/translation_decoding.json`.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks.reporting import machine, translation_run_parser, write_results  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "translation_decoding.json"


def eager_forward(model):
    import keras

    return lambda inputs: keras.ops.convert_to_numpy(model(inputs, training=False))


def compiled_forward(model):
    return model.predict_on_batch


def tutorial_loop(translator, source_row, forward):
    """`decode_sequence` of the tutorial: full forward pass per token, fixed shapes."""
    import numpy as np

    tokenizer = translator.tokenizer
    source = np.zeros((1, translator.max_source_length), "int32")
    source[0, :len(source_row)] = source_row
    target = np.zeros((1, translator.max_output_length - 1), "int32")
    target[0, 0] = tokenizer.start_id
    output = [tokenizer.start_id]
    for index in range(translator.max_output_length - 1):
        logits = np.array(forward({"source": source, "target": target})[0, index], "float32")
        logits[[0, tokenizer.start_id]] = -np.inf  # as `Decoder`: never padding or [start]
        token = int(np.argmax(logits))
        output.append(token)
        if token == tokenizer.end_id:
            break
        if index + 1 < target.shape[1]:
            target[0, index + 1] = token
    return output


def timed(function):
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def main(argv=None):
    import numpy as np

    from data_prep.text import pad_rows
    from workflows import translation as workflow
    from workflows.core import runs
    from workflows.seq2seq.batching import truncate

    parser = translation_run_parser("translation_decoding.py", __doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    run, translator = workflow.load_run_translator(args.run_id, beam_width=1)
    config = runs.config_of(workflow.LESSON, run)
    _, sources, _ = workflow.split_references(config, "test", args.spa_eng_path, args.work_dir,
                                              args.sentences)
    rows = truncate(translator.tokenizer.source_ids(sources), translator.max_source_length)

    def one_by_one():
        return [translator.generate(pad_rows([row], len(row)))[0] for row in rows]

    def batched():
        outputs = []
        for start in range(0, len(rows), args.batch_size):
            chunk = rows[start:start + args.batch_size]
            outputs.extend(translator.generate(pad_rows(chunk, max(map(len, chunk)))))
        return outputs

    def loop(forward):
        return [tutorial_loop(translator, row, forward) for row in rows]

    eager, compiled = eager_forward(translator.model), compiled_forward(translator.model)
    translator.generate(pad_rows(rows[:2], max(map(len, rows[:2]))))  # trace once, untimed
    tutorial_loop(translator, rows[0], compiled)  # likewise
    loop_outputs, loop_seconds = timed(lambda: loop(eager))
    compiled_outputs, compiled_seconds = timed(lambda: loop(compiled))
    single_outputs, single_seconds = timed(one_by_one)
    batch_outputs, batch_seconds = timed(batched)

    def same(cached):
        return sum(list(c[:len(t)]) == t for c, t in zip(cached, loop_outputs, strict=True))

    count = len(rows)
    results = {
        "run_id": run.info.run_id, "preset": run.data.params.get("preset"),
        "sentences": count, "batch_size": args.batch_size,
        "ms_per_sentence": {"tutorial_loop": round(1000 * loop_seconds / count, 2),
                            "tutorial_loop_compiled": round(1000 * compiled_seconds / count, 2),
                            "cached_one_by_one": round(1000 * single_seconds / count, 2),
                            "cached_batched": round(1000 * batch_seconds / count, 2)},
        "speedup_cached_batched": round(loop_seconds / batch_seconds, 1),
        "speedup_cached_one_by_one": round(loop_seconds / single_seconds, 1),
        "speedup_cached_batched_over_compiled_loop": round(compiled_seconds / batch_seconds, 1),
        "same_output_as_tutorial_loop": {"tutorial_loop_compiled": same(compiled_outputs),
                                         "cached_one_by_one": same(single_outputs),
                                         "cached_batched": same(batch_outputs)},
        "mean_output_tokens": round(float(np.mean([len(o) - 1 for o in loop_outputs])), 1),
        "machine": machine(),
    }
    write_results(results, args.output)


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
