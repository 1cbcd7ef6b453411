"""English-to-Spanish translation: the tutorial's Transformer and GRU, made fast and measured.

    python -m workflows.translation prepare --spa-eng-path ../shared/data/spa-eng.zip
    python -m workflows.translation train --model transformer --preset cpu
    python -m workflows.translation evaluate
    python -m workflows.translation translate "I love reading books."
    python -m workflows.translation compare

Presets: `tutorial` reproduces Deep Learning with Python (2e, ch. 11) exactly (word
vocabularies, length 20, one block each, `key_dim=embed_dim`, rmsprop); `cpu` is the
best model this project trains in about an hour on a 2-core CPU (WordPiece, 2+2
pre-LN blocks, label smoothing, Noam schedule, length bucketing, bfloat16); `gpu`
is a larger model with mixed precision for a GPU. Each training is one MLflow run
with per-epoch BLEU/chrF on a fixed validation sample; `evaluate` scores the test
split (all references of each English sentence) with greedy and beam decoding.
"""

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_prep import cache, spa_eng
from data_prep.sources import DataSourceError
from workflows import cli, tracking
from workflows import config as config_lib
from workflows.training import TrainingFolder, fit_resumably, starting_state

EXPERIMENT = "translation"
PYFUNC_FILE = Path(__file__).with_name("translation_pyfunc.py")
EXAMPLES = ["I love reading books.", "How are you?", "Where is the train station?",
            "She didn't want to go to school today."]


# ## Configuration


@dataclass(frozen=True)
class TranslationConfig:
    """One translator; the defaults are the tutorial's Transformer."""

    model: str = "transformer"  # transformer | gru_seq2seq
    preset: str = "tutorial"
    tokenization: str = "word"  # word (tutorial) | wordpiece
    sequence_length: int = 20  # longest source / target input, in tokens
    embed_dim: int = 256
    dense_dim: int = 2048
    num_heads: int = 8
    key_dim: int | None = 256  # None: embed_dim // num_heads
    encoder_layers: int = 1
    decoder_layers: int = 1
    dropout: float = 0.0  # inside the Transformer blocks and after the embeddings
    output_dropout: float = 0.5  # before the output layer
    norm_first: bool = False
    position: str = "learned"  # learned | sine
    tie_embeddings: bool = False
    scale_embeddings: bool = False
    latent_dim: int = 1024  # gru_seq2seq
    attention: bool = False  # gru_seq2seq: additive attention
    optimizer: str = "rmsprop"  # rmsprop | adam
    learning_rate: float = 0.001  # constant schedule; noam: a scale of the Noam curve
    schedule: str = "constant"  # constant | noam
    warmup_steps: int = 4000
    label_smoothing: float = 0.0
    batch_size: int = 64
    bucketing: bool = False  # batch sentences of similar length, pad per batch
    epochs: int = 30
    patience: int = 3
    max_train_minutes: float | None = None
    dtype_policy: str = "float32"  # float32 | mixed_bfloat16 | mixed_float16
    beam_width: int = 4
    validation_pairs: int = 3000  # fixed val subset for the per-epoch val loss
    bleu_sentences: int = 300  # fixed val sentences decoded each epoch for BLEU
    seed: int = 1337
    checkpoint_every_steps: int = 200

    @property
    def max_positions(self):
        return self.sequence_length


CPU = {"preset": "cpu", "tokenization": "wordpiece", "sequence_length": 40, "embed_dim": 256,
       "dense_dim": 1024, "num_heads": 4, "key_dim": None, "encoder_layers": 2,
       "decoder_layers": 2, "dropout": 0.1, "output_dropout": 0.0, "norm_first": True,
       "tie_embeddings": True, "scale_embeddings": True, "optimizer": "adam",
       "learning_rate": 1.0, "schedule": "noam", "warmup_steps": 2000, "label_smoothing": 0.1,
       "batch_size": 128, "bucketing": True, "epochs": 40, "patience": 3,
       "max_train_minutes": 60.0, "dtype_policy": "mixed_bfloat16"}
GPU = {**CPU, "preset": "gpu", "embed_dim": 512, "dense_dim": 2048, "num_heads": 8,
       "encoder_layers": 6, "decoder_layers": 6, "batch_size": 256, "warmup_steps": 4000,
       "max_train_minutes": None, "epochs": 60, "dtype_policy": "mixed_float16"}
PRESETS = {
    "transformer": {"tutorial": {}, "cpu": CPU, "gpu": GPU},
    "gru_seq2seq": {
        "tutorial": {"model": "gru_seq2seq", "epochs": 15},
        "cpu": {"model": "gru_seq2seq", "preset": "cpu", "tokenization": "wordpiece",
                "sequence_length": 40, "latent_dim": 512, "attention": True, "optimizer": "adam",
                "output_dropout": 0.3, "batch_size": 128, "bucketing": True,
                "max_train_minutes": 60.0, "epochs": 40},
        "gpu": {"model": "gru_seq2seq", "preset": "gpu", "tokenization": "wordpiece",
                "sequence_length": 40, "latent_dim": 1024, "attention": True,
                "optimizer": "adam", "output_dropout": 0.3, "batch_size": 256,
                "bucketing": True, "epochs": 40, "dtype_policy": "mixed_float16"},
    },
}
CHOICES = {"tokenization": ("word", "wordpiece"), "position": ("learned", "sine"),
           "optimizer": ("rmsprop", "adam"), "schedule": ("constant", "noam"),
           "dtype_policy": ("float32", "mixed_bfloat16", "mixed_float16")}


def make_config(model="transformer", preset="tutorial", overrides=None):
    """The preset's config for `model`, with `overrides` (field -> value) applied."""
    if model not in PRESETS:
        raise config_lib.ConfigError(f"Unknown --model {model!r}; valid models: "
                                     f"{', '.join(PRESETS)}.")
    if preset not in PRESETS[model]:
        raise config_lib.ConfigError(f"Unknown --preset {preset!r}; valid presets: "
                                     f"{', '.join(PRESETS[model])}.")
    config = TranslationConfig(**{"model": model, **PRESETS[model][preset]})
    config = config_lib.apply_overrides(config, overrides or {})
    for name, valid in CHOICES.items():
        if getattr(config, name) not in valid:
            raise config_lib.ConfigError(f"{name} must be one of {', '.join(valid)}, got "
                                         f"{getattr(config, name)!r}.")
    return config


# ## Prepare


def prepare(spa_eng_path=None, work_dir=None, tokenizations=("word", "wordpiece")):
    """Pairs, splits, vocabularies and cached token ids; prints a summary."""
    from workflows.translation_data import load_tokenizer, token_arrays

    started = time.perf_counter()
    prepared = spa_eng.prepare(spa_eng_path, spa_eng.SpaEngSettings(), work_dir)
    for kind in tokenizations:
        tokenizer = load_tokenizer(prepared, kind)
        arrays = token_arrays(prepared, tokenizer, work_dir)
        lengths = [len(row) for row in arrays["train"][1]]
        print(f"{kind}: vocabularies {tokenizer.vocabulary_sizes[0]:,} English / "
              f"{tokenizer.vocabulary_sizes[1]:,} Spanish; Spanish train sentences "
              f"{np.mean(lengths) - 2:.1f} tokens on average, 99th percentile "
              f"{np.percentile(lengths, 99) - 2:.0f}")
    cache.print_summary(prepared, started)
    return prepared


# ## Model and data


def build_model(config, source_vocab_size, target_vocab_size):
    import keras

    from workflows.translation_models import (
        MaskedCrossentropy,
        gru_translator,
        transformer_translator,
    )

    keras.config.set_dtype_policy(config.dtype_policy)
    build = transformer_translator if config.model == "transformer" else gru_translator
    model = build(config, source_vocab_size, target_vocab_size)
    model.compile(optimizer=make_optimizer(config), loss=MaskedCrossentropy(config.label_smoothing),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model


def learning_rate(config):
    from layers import NoamSchedule

    if config.schedule == "noam":
        return NoamSchedule(config.embed_dim, config.warmup_steps, scale=config.learning_rate)
    return config.learning_rate


def make_optimizer(config):
    import keras

    if config.optimizer == "adam":
        return keras.optimizers.Adam(learning_rate(config), beta_1=0.9, beta_2=0.98,
                                     epsilon=1e-9)
    return keras.optimizers.RMSprop(learning_rate(config))


@dataclass
class Data:
    """Tokenized splits for one config: training pairs and validation references."""

    tokenizer: object
    arrays: dict

    def batches(self, config, split, epoch=None, limit=None):
        from workflows.translation_data import PairBatches, truncate

        source, target = self.arrays[split]
        if limit:
            source, target = source[:limit], target[:limit]
        source = truncate(source, config.sequence_length)
        target = truncate(target, config.sequence_length + 1, keep_last=True)
        seed = None if epoch is None else config.seed + epoch
        return PairBatches(source, target, config.batch_size, seed,
                           fixed_length=None if config.bucketing else config.sequence_length)


def load_data(config, spa_eng_path=None, work_dir=None):
    from workflows.translation_data import load_tokenizer, token_arrays

    prepared = spa_eng.prepare(spa_eng_path, spa_eng.SpaEngSettings(), work_dir, verbose=False)
    tokenizer = load_tokenizer(prepared, config.tokenization, config.sequence_length)
    return prepared, Data(tokenizer, token_arrays(prepared, tokenizer, work_dir))


def make_translator(config, model, tokenizer):
    from workflows.translator import Translator

    return Translator(model, tokenizer, config.sequence_length, config.sequence_length + 1,
                      config.beam_width)


# ## Metrics


def bleu_scores(hypotheses, references):
    """Corpus sacreBLEU and chrF, standard and normalized, against all references.

    `references[i]` lists every Spanish translation of sentence `i`. Standard scores
    compare the text as written (cased, punctuated; sacreBLEU's 13a tokenizer);
    normalized scores lowercase and strip punctuation on both sides first, the form
    the tutorial's word-level models produce.
    """
    import sacrebleu

    from workflows.translation_data import normalize

    depth = max(map(len, references))
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(depth)]

    def normalized(texts):
        return [None if text is None else normalize(text) for text in texts]

    norm_streams = [normalized(stream) for stream in streams]
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, streams).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, streams).score,
        "normalized_bleu": sacrebleu.corpus_bleu(normalized(hypotheses), norm_streams).score,
        "normalized_chrf": sacrebleu.corpus_chrf(normalized(hypotheses), norm_streams).score,
    }


def validation_sample(prepared, config):
    from workflows.translation_data import references

    english, refs = references(prepared.pairs("val"))
    return english[:config.bleu_sentences], refs[:config.bleu_sentences]


# ## Train


def dataset_fingerprint(prepared, tokenizer):
    vocabulary = "\n".join(tokenizer.source_vocabulary + tokenizer.target_vocabulary)
    return f"{prepared.directory.name}:{tokenizer.kind}:{cache.settings_key(vocabulary)}"


def run_folder(config, fingerprint, work_dir=None):
    key = cache.settings_key({"config": dataclasses.asdict(config), "data": fingerprint})
    return cache.work_dir(work_dir) / "runs" / EXPERIMENT / f"{config.model}-{config.preset}-{key}"


def train(config, spa_eng_path=None, work_dir=None, retrain=False, verbose="auto",
          parent_run_id=None):
    """Trains `config` (or resumes it, or reuses a finished run); returns the MLflow run id."""
    import keras
    import mlflow

    from workflows.translation_data import for_backend

    prepared, data = load_data(config, spa_eng_path, work_dir)
    fingerprint = dataset_fingerprint(prepared, data.tokenizer)
    folder = run_folder(config, fingerprint, work_dir)
    state = starting_state(folder, retrain)
    if state.finished:
        print(f"{config.model} ({config.preset}) with this config is already trained: run "
              f"{state.run_id} ({folder}). Pass --retrain to train it again.")
        return state.run_id
    print(f"Training {config.model}, preset {config.preset}:\n{config_lib.describe(config)}")
    keras.utils.set_random_seed(config.seed)
    tracking.use_experiment(EXPERIMENT)
    model = build_model(config, *data.tokenizer.vocabulary_sizes)
    print(f"{model.count_params():,} parameters")
    translator = make_translator(config, model, data.tokenizer)
    sample = validation_sample(prepared, config)
    train_tokens = data.batches(config, "train", epoch=0).target_tokens()

    def on_epoch_end(epoch, metrics):
        started = time.perf_counter()
        hypotheses = translator.translate(sample[0], beam_width=1)
        scores = bleu_scores(hypotheses, sample[1])
        metrics.update({f"val_{name}": value for name, value in scores.items()})
        metrics["val_decode_seconds"] = time.perf_counter() - started
        if "epoch_seconds" in metrics:
            metrics["target_tokens_per_second"] = train_tokens / metrics["epoch_seconds"]
        metrics["learning_rate"] = float(keras.ops.convert_to_numpy(
            _current_learning_rate(model)))
        mlflow.log_metrics(metrics, step=epoch + 1)
        print(f"  val BLEU {scores['bleu']:.1f} (normalized {scores['normalized_bleu']:.1f}), "
              f"chrF {scores['chrf']:.1f}; e.g. {sample[0][0]!r} -> {hypotheses[0]!r}",
              flush=True)

    with mlflow.start_run(run_id=state.run_id or None,
                          run_name=None if state.run_id else f"{config.model}-{config.preset}",
                          tags=tracking.child_tags(parent_run_id)) as run:
        if state.run_id:
            print(f"Resuming run {state.run_id} from {folder}")
        else:
            _log_run_setup(config, fingerprint, data.tokenizer, folder, model)
            state.run_id = run.info.run_id
            TrainingFolder(folder).save_state(state)
        validation = for_backend(data.batches(config, "val", limit=config.validation_pairs))
        budget = config.max_train_minutes and config.max_train_minutes * 60
        state = fit_resumably(
            model, lambda epoch: for_backend(data.batches(config, "train", epoch)), validation,
            folder, config.epochs, config.patience, config.checkpoint_every_steps,
            train_examples=len(data.arrays["train"][0]), on_epoch_end=on_epoch_end,
            verbose=verbose, time_budget_seconds=budget)
        _log_training_summary(config, state, model)
        _export_and_log_model(translator, folder)
        TrainingFolder(folder).mark_finished(state)
    print(f"Run {state.run_id}: best val_loss {state.best_val_loss:.4f} at epoch "
          f"{state.best_epoch}, {state.train_seconds / 60:.1f} training minutes; translator in "
          f"{folder / 'translator'}")
    return state.run_id


def _current_learning_rate(model):
    rate = model.optimizer.learning_rate
    return rate(model.optimizer.iterations) if callable(rate) else rate


def _log_run_setup(config, fingerprint, tokenizer, folder, model):
    import mlflow

    mlflow.log_params(tracking.flat_params(config))
    mlflow.log_param("parameters", model.count_params())
    mlflow.set_tags(tracking.run_tags(config.model, fingerprint, preset=config.preset,
                                      run_folder=str(folder)))
    mlflow.log_dict(dataclasses.asdict(config), "config.json")
    mlflow.log_text("\n".join(tokenizer.source_vocabulary), "vocabulary/source.txt")
    mlflow.log_text("\n".join(tokenizer.target_vocabulary), "vocabulary/target.txt")


def _log_training_summary(config, state, model):
    import mlflow

    best = state.history[state.best_epoch - 1]
    timed = [epoch for epoch in state.history if "epoch_seconds" in epoch]
    summary = {"best_epoch": state.best_epoch, "trained_epochs": len(state.history),
               "best_val_loss": state.best_val_loss, "train_minutes": state.train_seconds / 60,
               "best_val_accuracy": best.get("val_accuracy", float("nan")),
               "best_val_bleu": best.get("val_bleu", float("nan")),
               "best_val_normalized_bleu": best.get("val_normalized_bleu", float("nan"))}
    if timed:
        summary["mean_epoch_seconds"] = float(np.mean([e["epoch_seconds"] for e in timed]))
        rates = [e["target_tokens_per_second"] for e in timed if "target_tokens_per_second" in e]
        if rates:
            summary["mean_target_tokens_per_second"] = float(np.mean(rates))
    mlflow.log_metrics(summary)
    mlflow.log_figure(tracking.learning_curves_figure(
        state.history, metrics=("loss", "accuracy", "normalized_bleu")), "learning_curves.png")
    if config.schedule != "constant":
        mlflow.log_figure(schedule_figure(config, model.optimizer.iterations), "lr_schedule.png")


def schedule_figure(config, iterations):
    """The learning rate over the steps trained (and a little beyond)."""
    import keras
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, max(int(keras.ops.convert_to_numpy(iterations)), 1) * 1.1 + 2)
    schedule = learning_rate(config)
    rates = keras.ops.convert_to_numpy(schedule(keras.ops.convert_to_tensor(steps - 1)))
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(steps, rates)
    axis.set(title=f"{config.schedule} schedule (warmup {config.warmup_steps})", xlabel="step",
             ylabel="learning rate")
    figure.tight_layout()
    return figure


def _export_and_log_model(translator, folder):
    import mlflow

    target = folder / "translator"
    partial = folder / ".partial-translator"
    shutil.rmtree(partial, ignore_errors=True)
    translator.save(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    tracking.log_pyfunc_model(
        PYFUNC_FILE, {"translator": target}, input_example=["How are you?"],
        pip_requirements=tracking.pinned_requirements(
            "keras", "keras-hub", "tensorflow", "tensorflow-text", "mlflow"),
        extra_code_paths=[Path(__file__).parent])
    mlflow.set_tag("model_logged", "true")


# ## Evaluate and translate


def load_run_translator(run_id=None, model_uri=None, beam_width=None):
    """(run, Translator) for a registered `model_uri`, a `run_id`, or the latest run."""
    import mlflow

    from workflows.translator import Translator

    if model_uri:
        run = tracking.find_run(EXPERIMENT, tracking.source_run_id(model_uri))
    else:
        run = tracking.find_run(EXPERIMENT, run_id)
        model_uri = tracking.model_uri(run.info.run_id)
    print(f"Loading {model_uri} (run {run.info.run_id}, {run.data.params.get('model')}, "
          f"preset {run.data.params.get('preset')})")
    with tempfile.TemporaryDirectory() as download:
        local = mlflow.artifacts.download_artifacts(f"{model_uri}/artifacts/translator",
                                                    dst_path=download)
        return run, Translator.load(local, beam_width)


def config_of(run):
    params = {k: v for k, v in run.data.params.items()
              if k in {f.name for f in dataclasses.fields(TranslationConfig)}}
    return make_config(params.pop("model"), params.pop("preset"), params)


def evaluate(run_id=None, spa_eng_path=None, work_dir=None, model_uri=None, limit=None,
             beam_width=None):
    """Test BLEU/chrF (greedy and beam), masked token accuracy, samples; logged to the run."""
    import mlflow

    from workflows.translation_data import for_backend, references

    run, translator = load_run_translator(run_id, model_uri)
    config = config_of(run)
    beam_width = beam_width or config.beam_width
    prepared, data = load_data(config, spa_eng_path, work_dir)
    english, refs = references(prepared.pairs("test"))
    english, refs = english[:limit], refs[:limit]
    results, outputs = {}, {}
    for name, width in (("greedy", 1), (f"beam{beam_width}", beam_width)):
        started = time.perf_counter()
        outputs[name] = translator.translate(english, beam_width=width)
        seconds = time.perf_counter() - started
        scores = bleu_scores(outputs[name], refs)
        results.update({f"test_{name}_{key}": value for key, value in scores.items()})
        results[f"test_{name}_ms_per_sentence"] = 1000 * seconds / len(english)
        print(f"{name}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, normalized BLEU "
              f"{scores['normalized_bleu']:.2f}, chrF {scores['normalized_chrf']:.2f} "
              f"({1000 * seconds / len(english):.1f} ms/sentence)", flush=True)
    translator.model.compile(loss=_loss(config), weighted_metrics=["accuracy"])
    _, results["test_masked_accuracy"] = translator.model.evaluate(
        for_backend(data.batches(config, "test")), verbose=0)
    with mlflow.start_run(run_id=run.info.run_id):
        mlflow.log_metrics(results)
        mlflow.log_dict({**results, "sentences": len(english)}, "test_metrics.json")
        mlflow.log_table(sample_table(english, refs, outputs), "sample_translations.json")
        mlflow.log_figure(attention_figure(translator, english[:4]), "attention.png")
    print(json.dumps({"run_id": run.info.run_id, "sentences": len(english), **results}, indent=2))
    return results


def _loss(config):
    from workflows.translation_models import MaskedCrossentropy

    return MaskedCrossentropy(config.label_smoothing)


def sample_table(english, refs, outputs, count=50):
    table = {"english": english[:count], "references": [" | ".join(r) for r in refs[:count]]}
    table.update({name: texts[:count] for name, texts in outputs.items()})
    return table


def attention_figure(translator, sentences):
    """Cross-attention of the last decoder block for a few test sentences (heatmaps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from workflows.translation_models import cross_attention

    figure, axes = plt.subplots(1, len(sentences), figsize=(5 * len(sentences), 4.5),
                                squeeze=False)
    for axis, sentence in zip(axes[0], sentences, strict=True):
        source_tokens, target_tokens, weights = cross_attention(translator, sentence)
        axis.imshow(weights, cmap="viridis", aspect="auto")
        axis.set_xticks(range(len(source_tokens)), source_tokens, rotation=60, fontsize=8)
        axis.set_yticks(range(len(target_tokens)), target_tokens, fontsize=8)
        axis.set_title(sentence[:40], fontsize=9)
    figure.tight_layout()
    return figure


def translate(texts, run_id=None, model_uri=None, beam_width=None):
    """Prints and returns the Spanish translation of each English text."""
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise TypeError(f"Sentences must be strings; items {bad[:10]} are not.")
    if not texts:
        raise config_lib.ConfigError("Give at least one English sentence to translate.")
    _, translator = load_run_translator(run_id, model_uri, beam_width)
    outputs = translator.translate(list(texts))
    for text, output in zip(texts, outputs, strict=True):
        print(f"{text}\n  -> {output}")
    return outputs


# ## Compare runs
COMPARE_COLUMNS = ("run_id", "params.model", "params.preset", "params.tokenization",
                   "params.parameters", "metrics.train_minutes", "metrics.best_val_bleu",
                   "metrics.test_greedy_normalized_bleu", "metrics.test_beam4_normalized_bleu",
                   "metrics.test_beam4_bleu", "metrics.test_beam4_chrf",
                   "metrics.mean_target_tokens_per_second", "start_time")


def compare(sort_by="metrics.test_beam4_normalized_bleu", model=None, since=None,
            style="text", ascending=False):
    """Prints this experiment's runs as a table, best first; returns the rows."""
    return cli.compare_runs(EXPERIMENT, COMPARE_COLUMNS, sort_by, model, since, style, ascending)


# ## Command line


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.translation",
                                     description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("prepare", help="pairs, splits, vocabularies, token ids")
    _add_data_arguments(step)
    for name, help_text in (("train", "train one translator (resumes an interrupted run)"),
                            ("run", "prepare, train, evaluate and translate")):
        step = steps.add_parser(name, help=help_text, description=help_text)
        _add_data_arguments(step)
        _add_train_arguments(step)
        if name == "run":
            step.add_argument("--limit", type=int, help="evaluate on the first N test sentences")
    step = steps.add_parser("evaluate", help="test BLEU/chrF of a run, logged to it")
    _add_model_arguments(step)
    _add_data_arguments(step)
    step.add_argument("--limit", type=int, help="only the first N test sentences")
    step = steps.add_parser("translate", help="translate English sentences with a run's model")
    step.add_argument("texts", nargs="*", help="English sentences")
    step.add_argument("--file", help="a UTF-8 text file, one sentence per line")
    _add_model_arguments(step)
    cli.add_compare_step(steps, "metrics.test_beam4_normalized_bleu", "metrics.best_val_bleu")
    cli.add_register_step(steps)
    args = parser.parse_args(argv)
    try:
        return _run_step(args)
    except (config_lib.ConfigError, tracking.RunNotFoundError, DataSourceError,
            FileNotFoundError, UnicodeDecodeError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _add_model_arguments(parser):
    cli.add_run_arguments(parser, "models:/translator/latest")
    parser.add_argument("--beam-width", type=int, help="1 for greedy (default: the run's)")


def _add_data_arguments(parser):
    source = spa_eng.SPA_ENG
    parser.add_argument(source.flag, help=f"{source.archive_name} or its folder (default: "
                        f"${source.env_var}, then the cache, then the download)")
    parser.add_argument("--work-dir", help="cache folder (default: $NLPKIT_WORK_DIR or ./work)")


def _add_train_arguments(parser):
    parser.add_argument("--model", default="transformer", help="transformer or gru_seq2seq")
    parser.add_argument("--preset", default="tutorial", help="tutorial, cpu or gpu")
    parser.add_argument("--attention", action="store_true",
                        help="gru_seq2seq: add additive (Bahdanau) attention")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--max-train-minutes", type=float,
                        help="stop before an epoch that would end past this budget")
    parser.add_argument("--retrain", action="store_true",
                        help="train again even if this exact config already finished")
    parser.add_argument("--register", metavar="NAME",
                        help="register the trained translator in the MLflow model registry")
    config_lib.add_config_arguments(parser)


def _config_from_args(args):
    overrides = config_lib.overrides_from_args(args)
    for key in ("epochs", "max_train_minutes"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.attention:
        overrides["attention"] = True
    return make_config(args.model, args.preset, overrides)


def _run_step(args):
    if getattr(args, "sweep", None) and args.step != "train":
        raise config_lib.ConfigError("--sweep works with the train step.")
    if args.step == "prepare":
        prepare(args.spa_eng_path, args.work_dir)
    elif args.step == "train" and args.sweep:
        config = _config_from_args(args)
        settings = config_lib.parse_sweep(args.sweep)
        for overrides in settings:  # refuse a bad value before the first child trains
            config_lib.apply_overrides(config, overrides)
        tracking.sweep(EXPERIMENT, f"sweep-{config.model}-{config.preset}", settings,
                       lambda overrides, parent: train(
                           config_lib.apply_overrides(config, overrides), args.spa_eng_path,
                           args.work_dir, args.retrain, parent_run_id=parent))
        compare(model=config.model)
    elif args.step in ("train", "run"):
        config = _config_from_args(args)
        if args.step == "run":
            prepare(args.spa_eng_path, args.work_dir, tokenizations=(config.tokenization,))
        run_id = train(config, args.spa_eng_path, args.work_dir, args.retrain)
        if args.register:
            tracking.register_model(run_id, args.register)
        if args.step == "run":
            evaluate(run_id, args.spa_eng_path, args.work_dir, limit=args.limit)
            translate(EXAMPLES, run_id)
            compare()
    elif args.step == "evaluate":
        evaluate(args.run_id, args.spa_eng_path, args.work_dir, args.model_uri, args.limit,
                 args.beam_width)
    elif args.step == "translate":
        texts = cli.read_texts(args.texts, args.file, "English sentences")
        translate(texts, args.run_id, args.model_uri, args.beam_width)
    elif args.step == "register":
        cli.register_run(EXPERIMENT, args.run_id, args.name, args.alias)
    elif args.step == "compare":
        compare(args.sort_by, args.model, args.since, args.format, args.ascending)
    return 0


if __name__ == "__main__":
    from data_prep.runtime import quiet_tensorflow

    quiet_tensorflow()
    sys.exit(main())
