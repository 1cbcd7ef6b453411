"""The lessons' GPU presets trained from prepared arrays, on a machine without TensorFlow.

A GPU machine may have JAX (or PyTorch) but neither TensorFlow nor MLflow. This script
carries what the lessons prepared (token ids, vocabularies, references) to it as one
bundle and trains there with the lessons' own code: their presets and compiled models
(`workflows/*/presets.py`), batches, `training.fit_resumably` (checkpoints, early
stopping, time budget), cached decoding and metrics. It logs nothing to MLflow: the
figures go to a JSON file.

Here (TensorFlow, the prepared data):

    python benchmarks/gpu_training.py export --spa-eng-path ../shared/data/spa-eng.zip \\
        --imdb-path ../shared/data/aclImdb_v1.tar.gz --output .bundle

On the GPU machine (`KERAS_BACKEND=jax`):

    python benchmarks/gpu_training.py translation --bundle .bundle --minutes 15
    python benchmarks/gpu_training.py language_model --bundle .bundle --minutes 4
    python benchmarks/gpu_training.py imdb_bilstm --bundle .bundle --epochs 3
    python benchmarks/gpu_training.py imdb_lm_classifier --bundle .bundle --lm-minutes 8 \
        --epochs 3 [--set lm.FIELD=VALUE] [--set pretrained=false]

Each step writes `<step>.json` into `--output-dir`.
"""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import keras
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))
from language_model import generation_speed  # noqa: E402  (benchmarks/, beside this file)
from reporting import machine  # noqa: E402

from data_prep.padding import pad_rows  # noqa: E402
from workflows.seq2seq.batching import batches_of  # noqa: E402

PROMPTS = ["The movie was", "I have never seen", "This film is a", "My favourite actor"]
MAX_REVIEW_SUBWORDS = 1024  # the language model's tokens per review, exported


# ## The bundle: ragged id arrays, vocabularies and references, small enough to carry


def save_ragged(arrays, name, rows):
    """`rows` (id lists) as a flat array and lengths, uint16 where the ids fit."""
    flat = np.concatenate([np.asarray(r) for r in rows]) if rows else np.zeros(0)
    arrays[f"{name}_flat"] = flat.astype("uint16" if flat.max(initial=0) < 2 ** 16 else "int32")
    arrays[f"{name}_lengths"] = np.asarray([len(r) for r in rows], "int32")


def load_ragged(arrays, name):
    flat = arrays[f"{name}_flat"].astype("int32")
    offsets = np.concatenate([[0], np.cumsum(arrays[f"{name}_lengths"])])
    return [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def export(args):
    """Writes the bundle: translation, language-model and IMDB arrays of the GPU presets."""
    from data_prep import imdb
    from data_prep.subwords import make_wordpiece_tokenizer
    from workflows import imdb_sentiment, language_model, translation
    from workflows.sentiment.subword_classifier import token_rows
    from workflows.seq2seq.tokenization import references

    bundle = Path(args.output)
    bundle.mkdir(parents=True, exist_ok=True)
    config = translation.make_config("transformer", "gpu")
    data = translation.load_data(config, args.spa_eng_path, args.work_dir)
    arrays, meta = {}, {"source_vocabulary": data.tokenizer.source_vocabulary,
                        "target_vocabulary": data.tokenizer.target_vocabulary}
    for split in ("train", "val"):
        for side, rows in zip(("source", "target"), data.arrays[split], strict=True):
            save_ragged(arrays, f"{split}_{side}", rows)
    for split in ("val", "test"):  # each English sentence once, with all its references
        english, refs = references(data.prepared.pairs(split))
        save_ragged(arrays, f"{split}_sentences", data.tokenizer.source_ids(english))
        meta[f"{split}_english"], meta[f"{split}_references"] = english, refs
    np.savez_compressed(bundle / "translation.npz", **arrays)
    (bundle / "translation.json").write_text(json.dumps(meta, ensure_ascii=False))

    lm = language_model.prepare(language_model.CATALOG.make("gpt", "gpu"), args.imdb_path,
                                args.work_dir, verbose=False)
    generator_vocabulary = lm.prepared.vocabulary()
    streams = {split: lm.prepared.token_ids(split).astype("uint16")
               for split in ("train", "val", "test")}
    np.savez_compressed(bundle / "language_model.npz", **streams)
    prompt_ids = [np.asarray(r).tolist() for r in make_wordpiece_tokenizer(
        generator_vocabulary)(PROMPTS)]
    (bundle / "language_model.json").write_text(json.dumps({
        "vocabulary": generator_vocabulary, "prompt_ids": prompt_ids,
        "tokens_per_word": {s: lm.tokens_per_word(s) for s in ("val", "test")}}))

    settings = imdb_sentiment.data_settings(imdb_sentiment.CATALOG.make("bilstm"))
    prepared = imdb.prepare(args.imdb_path, settings, args.work_dir, verbose=False)
    reviews, subwords = {}, {}  # the BiLSTM's word ids; the language model's subwords
    subword_tokenizer = make_wordpiece_tokenizer(generator_vocabulary)
    for split in ("train", "val", "test"):
        ids = prepared.token_ids(split)
        save_ragged(reviews, split, [row[row != 0] for row in ids])
        save_ragged(subwords, split, token_rows(subword_tokenizer, prepared.texts(split),
                                                MAX_REVIEW_SUBWORDS))
        reviews[f"{split}_labels"] = subwords[f"{split}_labels"] = \
            prepared.labels(split).astype("int8")
    np.savez_compressed(bundle / "imdb.npz", **reviews)
    np.savez_compressed(bundle / "imdb_subwords.npz", **subwords)
    (bundle / "imdb.json").write_text(json.dumps({"vocabulary_size": len(
        prepared.vocabulary())}))
    for path in sorted(bundle.iterdir()):
        print(f"{path}: {path.stat().st_size / 2 ** 20:.1f} MiB")


# ## Training runs (any backend; no TensorFlow, no MLflow)


def train(model, epoch_batches, validation, folder, config, minutes, examples, epoch_metrics):
    from workflows.training import fit_resumably

    started = time.perf_counter()
    state = fit_resumably(model, epoch_batches, validation, folder, config.epochs,
                          config.patience, checkpoint_every_steps=0, train_examples=examples,
                          verbose=2, time_budget_seconds=minutes * 60,
                          epoch_metrics=epoch_metrics)
    seconds = [epoch["epoch_seconds"] for epoch in state.history if "epoch_seconds" in epoch]
    return state, {"epochs": state.epoch, "best_epoch": state.best_epoch,
                   "train_minutes": state.train_seconds / 60,
                   "wall_minutes": (time.perf_counter() - started) / 60,
                   "first_epoch_seconds": seconds[0] if seconds else None,
                   "median_epoch_seconds": statistics.median(seconds[1:] or seconds),
                   "history": state.history}


def run_translation(args):
    from workflows.seq2seq.batching import PairBatches, truncate
    from workflows.seq2seq.metrics import bleu_scores
    from workflows.seq2seq.presets import build_model, make_config
    from workflows.seq2seq.tokenization import Tokenizer
    from workflows.seq2seq.translator import Translator

    arrays = np.load(Path(args.bundle) / "translation.npz")
    meta = json.loads((Path(args.bundle) / "translation.json").read_text())
    config = make_config("transformer", "gpu", parse_overrides(args.set))
    length = config.sequence_length
    tokenizer = Tokenizer("wordpiece", meta["source_vocabulary"], meta["target_vocabulary"],
                          length)
    model = build_model(config, *tokenizer.vocabulary_sizes)
    translator = Translator(model, tokenizer, length, length + 1, config.beam_width,
                            batch_size=512)
    pairs = {split: (truncate(load_ragged(arrays, f"{split}_source")[:args.limit], length),
                     truncate(load_ragged(arrays, f"{split}_target")[:args.limit], length + 1,
                              True))
             for split in ("train", "val")}
    multiple = length // 2  # two bucket lengths per side: few shapes for XLA to compile

    def batches(split, seed=None, limit=None):
        source, target = pairs[split]
        return PairBatches(source[:limit], target[:limit], config.batch_size, seed,
                           multiple=multiple)

    val_ids = load_ragged(arrays, "val_sentences")[:config.bleu_sentences]
    val_refs = meta["val_references"][:config.bleu_sentences]

    def epoch_metrics(epoch, metrics):
        scores = bleu_scores(translator.translate_ids(val_ids, beam_width=1), val_refs)
        metrics.update({f"val_{name}": value for name, value in scores.items()})
        print(f"  val BLEU {scores['bleu']:.1f} (normalized {scores['normalized_bleu']:.1f})",
              flush=True)

    train_batches = batches("train", seed=config.seed)
    state, results = train(model, lambda epoch: batches("train", seed=config.seed + epoch),
                           batches("val", limit=config.validation_pairs),
                           Path(args.work_dir) / "translation", config, args.minutes,
                           len(pairs["train"][0]), epoch_metrics)
    results["pairs_per_second"] = len(pairs["train"][0]) / results["median_epoch_seconds"]
    results["target_tokens_per_second"] = (train_batches.target_tokens()
                                           / results["median_epoch_seconds"])
    test_ids = load_ragged(arrays, "test_sentences")[:args.limit]
    test_refs = meta["test_references"][:args.limit]
    for name, width in (("greedy", 1), (f"beam{config.beam_width}", config.beam_width)):
        translator.translate_ids(test_ids[:translator.batch_size], width)  # compile, untimed
        started = time.perf_counter()
        outputs = translator.translate_ids(test_ids, width)
        seconds = time.perf_counter() - started
        scores = bleu_scores(outputs, test_refs)
        results.update({f"test_{name}_{k}": v for k, v in scores.items()})
        results[f"test_{name}_ms_per_sentence"] = 1000 * seconds / len(test_ids)
        results[f"test_{name}_samples"] = list(zip(meta["test_english"][:5], outputs[:5],
                                                   strict=True))
        print(f"test {name}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, normalized "
              f"{scores['normalized_bleu']:.2f} ({1000 * seconds / len(test_ids):.2f} "
              "ms/sentence)", flush=True)
    return {"config": config.__dict__, "parameters": model.count_params(),
            "test_sentences": len(test_ids), **results}


def pretrain_language_model(args, overrides, minutes):
    """The GPU preset GPT trained on the bundle's streams for `minutes`:
    (model, config, streams, vocabulary metadata, results)."""
    from workflows.causal_lm.batching import WindowBatches
    from workflows.causal_lm.presets import CATALOG, build_model

    streams = np.load(Path(args.bundle) / "language_model.npz")
    meta = json.loads((Path(args.bundle) / "language_model.json").read_text())
    config = CATALOG.make("gpt", "gpu", overrides)
    stream = {split: streams[split][:args.limit and args.limit * config.sequence_length]
              .astype("int32") for split in ("train", "val", "test")}
    model = build_model(config, len(meta["vocabulary"]))
    length, batch = config.sequence_length, config.batch_size
    every_val = WindowBatches(stream["val"], length, batch)
    validation = WindowBatches(stream["val"], length, batch, starts=np.random.default_rng(
        config.seed).permutation(every_val.starts)[:config.validation_windows])
    state, results = train(
        model, lambda epoch: WindowBatches(stream["train"], length, batch, config.seed + epoch,
                                           config.steps_per_epoch),
        validation, Path(args.work_dir) / "language_model", config, minutes,
        config.steps_per_epoch * batch, None)
    results["tokens_per_second"] = (config.steps_per_epoch * batch * length
                                    / results["median_epoch_seconds"])
    results["val_perplexity"] = math.exp(state.best_val_loss)
    return model, config, stream, meta, results


def run_language_model(args):
    from workflows.causal_lm.batching import WindowBatches
    from workflows.causal_lm.generator import Generator, Sampling

    model, config, stream, meta, results = pretrain_language_model(
        args, parse_overrides(args.set), args.minutes)
    length, batch = config.sequence_length, config.batch_size
    model.compile(loss=model.loss)
    for split in ("val", "test"):
        loss = model.evaluate(WindowBatches(stream[split], length, batch), verbose=0)
        loss = loss[0] if isinstance(loss, list) else loss
        results[f"{split}_perplexity"] = math.exp(loss)
        results[f"{split}_word_perplexity"] = math.exp(loss * meta["tokens_per_word"][split])
    generator = Generator(model, meta["vocabulary"])
    prompts = meta["prompt_ids"]
    results["samples"] = {
        "prompts": PROMPTS,
        "greedy": generator.continue_ids(prompts, Sampling(max_new_tokens=40)),
        "top_p_0.9": generator.continue_ids(prompts, Sampling("top_p", 40, temperature=0.8,
                                                              top_p=0.9, seed=1))}
    same_length = [row for row in prompts if len(row) == len(prompts[0])]
    results["generation"], _ = generation_speed(generator, same_length, args.tokens)
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return {"config": config.__dict__, "parameters": model.count_params(),
            "train_tokens": len(stream["train"]), **results}


class ReviewBatches(keras.utils.PyDataset):
    """IMDB token ids batched by similar length, each batch padded to its longest review
    rounded up to `multiple` (the lesson's bucketing, without tf.data)."""

    def __init__(self, rows, labels, batch_size, seed=None, multiple=50):
        super().__init__()
        self.rows, self.labels, self.multiple = rows, labels, multiple
        self.batches = batches_of(len(rows), batch_size, seed, [len(r) for r in rows])

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        chosen = self.batches[index]
        longest = max(len(self.rows[i]) for i in chosen)
        ids = pad_rows([self.rows[i] for i in chosen], -(-longest // self.multiple) * self.multiple)
        return ids, self.labels[chosen].astype("float32")


def run_imdb_bilstm(args):
    from workflows.sentiment.presets import CATALOG, build_model

    arrays = np.load(Path(args.bundle) / "imdb.npz")
    meta = json.loads((Path(args.bundle) / "imdb.json").read_text())
    config = CATALOG.make("bilstm", None, {"epochs": args.epochs, **parse_overrides(args.set)})
    data = {split: (load_ragged(arrays, split)[:args.limit],
                    arrays[f"{split}_labels"][:args.limit]) for split in ("train", "val", "test")}
    model = build_model(config, meta["vocabulary_size"])
    state, results = train(
        model, lambda epoch: ReviewBatches(*data["train"], config.batch_size, config.seed + epoch),
        ReviewBatches(*data["val"], 256), Path(args.work_dir) / "imdb_bilstm", config,
        args.minutes, len(data["train"][1]), None)
    _, results["test_accuracy"] = model.evaluate(ReviewBatches(*data["test"], 256), verbose=0)
    return {"config": config.__dict__, "parameters": model.count_params(), **results}


def run_imdb_lm_classifier(args):
    """Pretrains the GPU preset GPT for `--lm-minutes`, then fine-tunes it under the
    `lm_classifier` head on the labelled reviews (and, with `--set pretrained=false`,
    trains the same classifier from scratch); test accuracy on all 25,000 reviews."""
    from workflows.classification import binary_metrics
    from workflows.sentiment.presets import CATALOG, LM_ARCHITECTURE, build_model

    overrides = parse_overrides(args.set)
    classifier_overrides = {k: v for k, v in overrides.items() if not k.startswith("lm.")}
    lm_model, lm_config, _, meta, lm_results = pretrain_language_model(
        args, {k[3:]: v for k, v in overrides.items() if k.startswith("lm.")}, args.lm_minutes)
    config = CATALOG.make("lm_classifier", None, {
        "init_from": "pretrained on the GPU", "epochs": args.epochs,
        **{name: getattr(lm_config, name) for name in LM_ARCHITECTURE},
        **classifier_overrides})
    arrays = np.load(Path(args.bundle) / "imdb_subwords.npz")
    data = {split: ([row[:config.max_review_tokens]
                     for row in load_ragged(arrays, split)[:args.limit]],
                    arrays[f"{split}_labels"][:args.limit]) for split in ("train", "val", "test")}
    train_batches = ReviewBatches(*data["train"], config.batch_size, config.seed,
                                  multiple=config.sequence_length)
    model = build_model(config, config.vocabulary_size, lm_model, len(train_batches))
    state, results = train(
        model, lambda epoch: ReviewBatches(*data["train"], config.batch_size, config.seed + epoch,
                                           multiple=config.sequence_length),
        ReviewBatches(*data["val"], 64, multiple=config.sequence_length),
        Path(args.work_dir) / f"imdb_lm_classifier{'' if config.pretrained else '_scratch'}",
        config, args.minutes,
        len(data["train"][1]), None)
    test = ReviewBatches(*data["test"], 64, multiple=config.sequence_length)
    started = time.perf_counter()
    probabilities = np.concatenate([np.asarray(model.predict_on_batch(test[i][0]))
                                    .reshape(-1) for i in range(len(test))])
    results["test_reviews_per_second"] = len(probabilities) / (time.perf_counter() - started)
    labels = np.concatenate([test[i][1] for i in range(len(test))])
    metrics = binary_metrics(labels, probabilities)
    results.update({f"test_{k}": v for k, v in metrics.items()})
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return {"config": config.__dict__, "parameters": model.count_params(),
            "language_model": {"config": lm_config.__dict__, **lm_results}, **results}


def parse_overrides(pairs):
    """`--set FIELD=VALUE` flags as overrides (the config coerces and checks them)."""
    return dict(pair.split("=", 1) for pair in pairs or ())


STEPS = {"translation": run_translation, "language_model": run_language_model,
         "imdb_bilstm": run_imdb_bilstm, "imdb_lm_classifier": run_imdb_lm_classifier}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_training.py",
                                     description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    exporting = steps.add_parser("export", help="write the bundle (needs TensorFlow)")
    exporting.add_argument("--spa-eng-path")
    exporting.add_argument("--imdb-path")
    exporting.add_argument("--work-dir")
    exporting.add_argument("--output", required=True)
    for name in STEPS:
        step = steps.add_parser(name, help=f"train and measure the {name} GPU preset")
        step.add_argument("--bundle", required=True)
        step.add_argument("--work-dir", default="/tmp/gpu_training")
        step.add_argument("--output-dir", default=".")
        step.add_argument("--minutes", type=float, default=10.0, help="training budget")
        step.add_argument("--epochs", type=int, default=3, help="imdb_*: epochs")
        step.add_argument("--lm-minutes", type=float, default=8.0,
                          help="imdb_lm_classifier: language-model pretraining budget")
        step.add_argument("--tokens", type=int, default=128, help="generated, timed")
        step.add_argument("--set", action="append", metavar="FIELD=VALUE",
                          help="override a preset field")
        step.add_argument("--limit", type=int, help="a smoke test: only the first N training "
                                                    "items and test sentences / windows")
    args = parser.parse_args(argv)
    if args.step == "export":
        return export(args)
    results = {**STEPS[args.step](args), "machine": machine(device=device_name())}
    path = Path(args.output_dir) / f"{args.step}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"Wrote {path}")


def device_name():
    if keras.backend.backend() == "jax":
        import jax

        return ", ".join(sorted({d.device_kind for d in jax.devices()}))
    if keras.backend.backend() == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return "cpu"


if __name__ == "__main__":
    main()
