"""Language modelling: a GPT trained from the kit's layers, then fine-tuned on your corpus.

    python -m workflows.language_model prepare                      # IMDB reviews (not test)
    python -m workflows.language_model train --preset cpu           # about an hour on a CPU
    python -m workflows.language_model evaluate                     # test perplexity
    python -m workflows.language_model generate "The movie was" --sampler top_p --top-p 0.9
    python -m workflows.language_model train --init-from <run id> --corpus my_texts/
    python -m workflows.language_model train --init-from ~/gpt2_base_en --corpus my_texts/

The model is a decoder-only Transformer (`workflows/causal_lm/`): token and position
embeddings, pre-LN `TransformerDecoder` blocks without cross-attention, a final norm
and logits tied to the token embedding. It is measured in perplexity per token and per
word (so models with different tokenizers compare), and generates with the layers'
cache and keras-hub's samplers. Fine-tuning (`--init-from`: a run of this lesson, or a
keras-hub causal LM preset, `causal_lm/hub.py`, with LoRA if asked) keeps the source
model's tokenizer and reports perplexity on the new corpus before and after.
"""

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_prep import corpus, imdb
from process.commands import run_main
from workflows.causal_lm.presets import (  # noqa: F401  (API)
    CATALOG,
    EXPERIMENT,
    LMConfig,
)
from workflows.causal_lm.sampling import PYFUNC_PARAMS, SAMPLERS, Sampling
from workflows.core.cli import LessonCLI
from workflows.core.config import ConfigError
from workflows.core.lesson import Built, Lesson, ModelExport, RunDataset, dataset_digest
from workflows.core.step_inputs import check_texts, read_texts
from workflows.core.whole_lesson import WholeLesson, add_whole_lesson

PYFUNC_FILE = Path(__file__).parent / "causal_lm" / "pyfunc.py"
PROMPTS = ["The movie was", "I have never seen", "This film is a", "My favourite actor"]
DEFAULT_SAMPLING = Sampling()
ARCHITECTURE = ("vocabulary_size", "sequence_length", "embed_dim", "dense_dim", "num_heads",
                "num_layers")


# ## Configuration
# `LMConfig` and its presets are `causal_lm/presets.py`, the GPT and `build_model`
# `causal_lm/models.py` (no MLflow or TensorFlow there: a GPU machine trains them from
# the prepared arrays on JAX).


def complete_config(config):
    """With `init_from`, the architecture is the source model's (and its run is named),
    or a keras-hub preset's (its folder's full path recorded)."""
    from workflows.causal_lm import hub
    from workflows.causal_lm import source as lm_source
    from workflows.core import runs

    if not config.init_from:
        return config
    if hub.is_hub_source(config.init_from):
        if config.extend_vocabulary:
            raise ConfigError("extend_vocabulary adds words to the kit's own WordPiece "
                              "models; a keras-hub preset keeps its tokenizer: drop it.")
        print(f"Fine-tuning the keras-hub model {config.init_from}: its tokenizer is kept")
        return dataclasses.replace(config, init_from=hub.resolved(config.init_from))
    if config.lora_rank:
        raise ConfigError("lora_rank adapts a keras-hub preset (--init-from FOLDER); "
                          "fine-tune a run of this lesson without it.")
    run = lm_source.source_run(config.init_from)
    source = runs.config_of(LESSON, run)
    print(f"Fine-tuning run {run.info.run_id}: its architecture and vocabulary are kept")
    return dataclasses.replace(config, init_from=run.info.run_id,
                               **{name: getattr(source, name) for name in ARCHITECTURE})


# ## Prepare the data
# Documents split into train/validation/test, a WordPiece vocabulary, token streams.


@dataclass
class CorpusData:
    prepared: corpus.PreparedCorpus
    source: Any  # the `Generator` to fine-tune, if any (None)
    extension: dict | None = None  # the words added to its vocabulary, if any

    @property
    def fingerprint(self):
        return self.prepared.directory.name

    def tokens_per_word(self, split):
        """Tokens per word (each document's `[END]` counts as a word), to convert
        perplexity per token into perplexity per word."""
        summary = self.prepared.summary
        return summary["tokens"][split] / (summary["words"][split]
                                           + summary["documents"][split])

    def batches(self, config, split, epoch=None, windows=None):
        """An epoch of training batches (`epoch`), a fixed sample of `windows` windows,
        or (neither) every window of the split once."""
        from workflows.causal_lm import batching as lm_batching

        stream = self.prepared.token_ids(split)
        if epoch is not None:
            return lm_batching.WindowBatches(stream, config.sequence_length,
                                             config.batch_size, config.seed + epoch,
                                             config.steps_per_epoch)
        every = lm_batching.WindowBatches(stream, config.sequence_length, config.batch_size)
        if windows is None or windows >= len(every.starts):
            return every
        starts = np.random.default_rng(config.seed).permutation(every.starts)[:windows]
        return lm_batching.WindowBatches(stream, config.sequence_length, config.batch_size,
                                         config.seed, starts=starts)


def prepare(config=None, imdb_path=None, work_dir=None, verbose=True, source=None,
            extend=False):
    """The corpus of `config`, prepared (or reused), with the vocabulary of the model it
    fine-tunes (`source`, loaded from `init_from` if not given); returns `CorpusData`.

    With `extend` and `config.extend_vocabulary`, words of the new corpus are added to
    that vocabulary and model first (`causal_lm/vocabulary.py`), and the corpus is
    tokenized with the extended vocabulary."""
    from workflows.causal_lm import generator as generators
    from workflows.causal_lm import hub
    from workflows.causal_lm import source as lm_source
    from workflows.causal_lm import vocabulary as vocabulary_extension

    config = config or CATALOG.base("gpt")
    if source is None and config.init_from:
        source = lm_source.load_source(config)
    settings = corpus.CorpusSettings(vocabulary_size=config.vocabulary_size,
                                     seed=config.seed)
    if isinstance(source, hub.HubGenerator):  # its own tokenizer
        return CorpusData(corpus.prepare(config.corpus, imdb_path, settings, work_dir,
                                         verbose=verbose, tokens=source.tokens), source)
    prepared = corpus.prepare(config.corpus, imdb_path, settings, work_dir,
                              vocabulary=source and source.vocabulary, verbose=verbose)
    if not (extend and source and config.extend_vocabulary):
        return CorpusData(prepared, source)
    documents = prepared.documents("train")
    words = vocabulary_extension.new_words(documents, source.vocabulary,
                                           config.extend_vocabulary)
    model, extended, summary = vocabulary_extension.extend(
        source.model, source.vocabulary, words, documents, config.extension_init)
    print(f"Added {len(words)} words of the new corpus to the vocabulary "
          f"({config.extension_init} initialisation), e.g. "
          f"{', '.join(summary['added_words'][:8])}")
    prepared = corpus.prepare(config.corpus, imdb_path, settings, work_dir,
                              vocabulary=extended, verbose=verbose)
    return CorpusData(prepared, generators.Generator(model, extended), summary)


def load_data(config, imdb_path=None, work_dir=None):
    return prepare(config, imdb_path, work_dir, verbose=False, extend=True)


# ## Train
# The lesson's hooks: the data, the model (a fine-tuning first measures where it
# starts), a resumable fit that logs perplexities and sample continuations each epoch,
# the export of the generator. `core/training.py` runs them in that order, in a tracked
# run.


def perplexities(data, split, loss):
    return {"perplexity": math.exp(loss),
            "word_perplexity": math.exp(loss * data.tokens_per_word(split))}


class LanguageModelLesson(Lesson):
    """The lesson's hooks, in the order `core/training.py` runs them."""

    experiment, catalog = EXPERIMENT, CATALOG
    packages = ("causal_lm",)
    exported = ("workflows.causal_lm.exported", "generator")  # the export step's network
    compare_columns = ("run_id", "params.preset", "params.init_from", "tags.corpus",
                       "params.parameters", "metrics.train_minutes",
                       "metrics.best_val_perplexity", "metrics.test_perplexity",
                       "metrics.test_word_perplexity", "metrics.mean_tokens_per_second",
                       "start_time")
    sort_by, ascending = "metrics.test_perplexity", True

    def complete_config(self, config):
        return complete_config(config)

    def run_name(self, config):
        """`gpt-cpu`, or a keras-hub model's folder (or preset) name: `hub-gpt2_base_en`."""
        from workflows.causal_lm import hub

        if config.init_from and hub.is_hub_source(config.init_from):
            return f"hub-{Path(config.init_from).name}"
        return super().run_name(config)

    def load_data(self, config, place):
        return load_data(config, place.path, place.work_dir)

    def datasets(self, config, data, place):
        name = data.prepared.summary["source"]
        return [RunDataset(f"{name} {split}", dataset_digest(data.fingerprint, split),
                           str(data.prepared.directory), context,
                           len(data.prepared.documents(split)))
                for split, context in (("train", "training"), ("val", "validation"))]

    def build(self, config, data, place):
        from workflows.causal_lm import generator as generators
        from workflows.causal_lm import hub
        from workflows.causal_lm.models import build_model
        from workflows.core import batches

        if isinstance(data.source, hub.HubGenerator):
            generator, family = data.source, {"model_family": "hub",
                                              "architecture": data.source.architecture}
            vocabulary = {}
        else:
            entries = data.source.vocabulary if data.source else data.prepared.vocabulary()
            generator, family = None, {"model_family": "gpt"}
            vocabulary = {"vocabulary.txt": "\n".join(entries)}
        model = build_model(config, data.prepared.summary["vocabulary_size"], data.source)
        generator = generator or generators.Generator(model, entries)
        validation = batches.for_backend(data.batches(config, "val",
                                                      windows=config.validation_windows))
        return Built(model, (generator, validation),
                     params={"parameters": model.count_params(),
                             "trainable_parameters": trainable_count(model),
                             "vocabulary_entries": generator.vocabulary_size},
                     tags={**family, "preset": config.preset,
                           "corpus": data.prepared.summary["source"]},
                     artifacts={**vocabulary, "corpus_summary.json": data.prepared.summary,
                                **({"vocabulary_extension.json": data.extension}
                                   if data.extension else {})},
                     metrics=starting_perplexities(data, model, validation))

    def fit(self, training, config, data, built):
        from workflows.core import batches

        generator, validation = built.parts
        training.fit(lambda epoch: batches.for_backend(data.batches(config, "train", epoch)),
                     validation, config.steps_per_epoch * config.batch_size,
                     epoch_end=epoch_scores(config, data, generator),
                     curves=("loss", "perplexity"))

    def export(self, config, data, built):
        return ModelExport("generator", built.parts[0].save, PYFUNC_FILE, PROMPTS[:1],
                           packages=("causal_lm",), params=PYFUNC_PARAMS)


LESSON = LanguageModelLesson()


def trainable_count(model):
    """Weights the fit updates (with LoRA, the adapters' only)."""
    return int(sum(np.prod(weight.shape) for weight in model.trainable_weights))


def starting_perplexities(data, model, validation):
    """A fine-tuning's validation perplexities before it trains, on the new corpus."""
    if not data.source:
        return {}
    loss = model.evaluate(validation, verbose=0)[0]
    before = {f"before_val_{k}": v for k, v in perplexities(data, "val", loss).items()}
    print(f"Before fine-tuning: validation perplexity {before['before_val_perplexity']:.1f}"
          f" per token, {before['before_val_word_perplexity']:.1f} per word")
    return before


def epoch_scores(config, data, generator):
    """`epoch_end(epoch, metrics)`: validation perplexities, tokens per second, and the
    continuations of fixed prompts, logged as a table."""
    import mlflow

    def epoch_end(epoch, metrics):
        metrics.update({f"val_{k}": v for k, v in perplexities(
            data, "val", metrics["val_loss"]).items()})
        if "epoch_seconds" in metrics:
            metrics["tokens_per_second"] = (config.steps_per_epoch * config.batch_size
                                            * config.sequence_length / metrics["epoch_seconds"])
        samples = sample_table(generator, config.sample_tokens)
        mlflow.log_table(samples, f"samples/epoch_{epoch + 1:03d}.json")
        print(f"  val perplexity {metrics['val_perplexity']:.1f} per token, "
              f"{metrics['val_word_perplexity']:.1f} per word; {PROMPTS[0]!r} -> "
              f"{samples['greedy'][0]!r}", flush=True)

    return epoch_end


def sample_table(generator, tokens, prompts=PROMPTS):
    """Continuations of fixed prompts: greedy, and top-p sampling with a fixed seed."""
    return {"prompt": list(prompts),
            "greedy": generator.generate(prompts, Sampling(max_new_tokens=tokens)),
            "top_p_0.9": generator.generate(prompts, Sampling(
                "top_p", tokens, temperature=0.8, top_p=0.9, seed=1))}


# ## Evaluate and generate


def evaluate(run_id=None, imdb_path=None, work_dir=None, model_uri=None):
    """Test and validation perplexity (per token and per word), sample generations."""
    from workflows.causal_lm import source as lm_source
    from workflows.core import batches, runs, tracking

    run = runs.model_run(LESSON, run_id, model_uri)
    generator, config = lm_source.load_generator(run), runs.config_of(LESSON, run)
    data = prepare(config, imdb_path, work_dir, verbose=False,
                   source=generator if config.init_from else None)
    generator.model.compile(loss=generator.training_loss())
    tracking.log_datasets([RunDataset(
        f"{data.prepared.summary['source']} test", dataset_digest(data.fingerprint, "test"),
        str(data.prepared.directory), "test", len(data.prepared.documents("test")))],
        run.info.run_id)
    results = {}
    for split in ("val", "test"):
        loss = generator.model.evaluate(batches.for_backend(data.batches(config, split)), verbose=0)
        loss = loss[0] if isinstance(loss, list) else loss
        results.update({f"{split}_{k}": v for k, v in perplexities(data, split, loss).items()})
    runs.log_evaluation(run.info.run_id, {f"final_{k}" if k.startswith("val") else k: v
                                               for k, v in results.items()},
                             dicts={"test_metrics.json": results},
                             tables={"samples/test.json": sample_table(generator, 40)})
    print(json.dumps({"run_id": run.info.run_id, **results}, indent=2))
    return results


def generate(prompts, run_id=None, model_uri=None, sampling=DEFAULT_SAMPLING):
    """Prints and returns the continuation of each prompt."""
    from workflows.causal_lm import source as lm_source
    from workflows.core import runs

    check_texts(prompts, "prompt")
    try:
        sampling.check()
    except ValueError as error:
        raise ConfigError(str(error)) from None
    run = runs.model_run(LESSON, run_id, model_uri)
    outputs = lm_source.load_generator(run).generate(list(prompts), sampling)
    for prompt, output in zip(prompts, outputs, strict=True):
        print(f"{prompt} ... {output}")
    return outputs


def compare(sort_by=None, model=None, since=None, style="text"):
    """Prints this lesson's runs as a table, lowest test perplexity first."""
    from workflows.core import runs

    return runs.compare(LESSON, sort_by, model, since, style)


# ## Command line


def sampling_from_args(args):
    return Sampling(args.sampler, args.max_new_tokens, args.temperature, args.top_k,
                    args.top_p, args.num_beams, args.seed)


CLI = LessonCLI(LESSON, "workflows.language_model", __doc__.split("\n")[0], imdb.ACL_IMDB,
                shortcuts=("corpus", "init_from"))
_prepare = CLI.step("prepare", "split the corpus, learn its vocabulary, tokenize it",
                    lambda a: prepare(CLI.configs(a)[0], a.imdb_path, a.work_dir), data=True,
                    train="one")
CLI.step("train", "train a model, or fine-tune one (--init-from)", CLI.train, data=True,
         train="one")
add_whole_lesson(CLI, "prepare, train, evaluate and generate", WholeLesson(
    prepare=lambda a, configs: prepare(configs[0], a.imdb_path, a.work_dir),
    evaluate=lambda a, run_id: evaluate(run_id, a.imdb_path, a.work_dir),
    use=lambda a, config, run_id, prepared: generate(PROMPTS, run_id, sampling=Sampling(
        "top_p", 40, temperature=0.8, seed=1))))
CLI.step("evaluate", "test perplexity of a run, logged to it", lambda a: evaluate(
    a.run_id, a.imdb_path, a.work_dir, a.model_uri), data=True, model=True)
_generate = CLI.step("generate", "continue prompts with a run's model", lambda a: generate(
    read_texts(a.texts, a.file, "prompts"), a.run_id, a.model_uri, sampling_from_args(a)),
    model=True, texts="prompts", check=lambda a: read_texts(a.texts, a.file, "prompts"))
_generate.add_argument("--sampler", default="greedy", help=f"one of {', '.join(SAMPLERS)}")
for _flag, _type, _default in (("--max-new-tokens", int, 40), ("--temperature", float, 1.0),
                               ("--top-k", int, 10), ("--top-p", float, 0.9),
                               ("--num-beams", int, 4), ("--seed", int, None)):
    _generate.add_argument(_flag, type=_type, default=_default)
CLI.shared_steps()
main = CLI.main

if __name__ == "__main__":
    run_main(main)
