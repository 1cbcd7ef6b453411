"""Scoring a translator: on the test split, logged back to its run (the translation
lesson's `evaluate` step), and on a validation sample at each epoch's end."""

import json
import time

from tqdm import tqdm

from data_prep.pair_tokens import references
from workflows.core import batches, compilation, figures, runs
from workflows.seq2seq.metrics import bleu_scores


def translate_in_batches(translator, texts, beam_width, label, length_penalty=0.0,
                         chunk_size=1024):
    outputs = []
    with tqdm(total=len(texts), desc=label, disable=None) as progress:
        for start in range(0, len(texts), chunk_size):
            outputs += translator.translate(texts[start:start + chunk_size], beam_width,
                                            length_penalty)
            progress.update(len(texts[start:start + chunk_size]))
    return outputs


def score_and_log(run, translator, config, test, beam_width, length_penalty=None):
    """BLEU/chrF of `translator` on `test` = (data, sources, references) with greedy and
    beam decoding (and the beams re-ranked with `length_penalty`, if given), its masked
    token accuracy, attention maps and sample translations, logged to `run`."""
    import layers

    data, sources, refs = test
    results, outputs = {}, {}
    decodings = [("greedy", 1, 0.0), (f"beam{beam_width}", beam_width, 0.0)]
    if length_penalty:
        decodings.append((f"beam{beam_width}_lp{length_penalty:g}", beam_width, length_penalty))
    for name, width, alpha in decodings:
        started = time.perf_counter()
        outputs[name] = translate_in_batches(translator, sources, width, f"Decoding ({name})",
                                             alpha)
        seconds = time.perf_counter() - started
        scores = bleu_scores(outputs[name], refs)
        results.update({f"test_{name}_{key}": value for key, value in scores.items()})
        results[f"test_{name}_ms_per_sentence"] = 1000 * seconds / len(sources)
        print(f"{name}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, normalized BLEU "
              f"{scores['normalized_bleu']:.2f}, chrF {scores['normalized_chrf']:.2f} "
              f"({1000 * seconds / len(sources):.1f} ms/sentence)", flush=True)
    results["test_sentences"] = len(sources)
    test_batches = batches.for_backend(data.batches(config, "test"))
    translator.model.compile(optimizer=None, weighted_metrics=["accuracy"],  # scoring only
                             loss=layers.MaskedCrossentropy(config.label_smoothing))
    compilation.build_before_tracing(translator.model, test_batches)  # one trace on TF
    _, results["test_masked_accuracy"] = translator.model.evaluate(test_batches, verbose=0)
    panels = [(sentence[:40], *translator.cross_attention(sentence)) for sentence in sources[:4]]
    table = {"source": sources[:50], "references": [" | ".join(r) for r in refs[:50]],
             **{name: texts[:50] for name, texts in outputs.items()}}
    runs.log_evaluation(
        run.info.run_id, results, dicts={"test_metrics.json": {**results,
                                                               "sentences": len(sources)}},
        figures={"attention.png": figures.heatmaps(panels)},
        tables={"sample_translations.json": table})
    print(json.dumps({"run_id": run.info.run_id, "sentences": len(sources), **results}, indent=2))
    return results


def validation_sample_scores(config, data, translator):
    """`epoch_end(epoch, metrics)`: greedy BLEU and chrF of the first `bleu_sentences`
    validation sources (every `bleu_every_epochs` epochs, and for averaged weights,
    epoch -1), and the target tokens trained per second."""
    sources, refs = references(data.prepared.pairs("val", config.direction))
    sample = sources[:config.bleu_sentences], refs[:config.bleu_sentences]
    train_tokens = data.batches(config, "train", epoch=0).target_tokens()

    def epoch_end(epoch, metrics):
        if "epoch_seconds" in metrics:
            metrics["target_tokens_per_second"] = train_tokens / metrics["epoch_seconds"]
        if epoch >= 0 and (epoch + 1) % config.bleu_every_epochs:
            return
        started = time.perf_counter()
        hypotheses = translator.translate(sample[0], beam_width=1)
        scores = bleu_scores(hypotheses, sample[1])
        metrics.update({f"val_{name}": value for name, value in scores.items()})
        metrics["val_decode_seconds"] = time.perf_counter() - started
        print(f"  val BLEU {scores['bleu']:.1f} (normalized {scores['normalized_bleu']:.1f}), "
              f"chrF {scores['chrf']:.1f}; e.g. {sample[0][0]!r} -> {hypotheses[0]!r}",
              flush=True)

    return epoch_end
