"""English-Spanish translation: the tutorial's Transformer and GRU, made fast and measured.

    python -m workflows.translation prepare --spa-eng-path ../shared/data/spa-eng.zip
    python -m workflows.translation train --model transformer --preset cpu
    python -m workflows.translation evaluate
    python -m workflows.translation translate "I love reading books."
    python -m workflows.translation train --preset cpu --direction es-en
    python -m workflows.translation translate --direction es-en "Me encanta leer."
    python -m workflows.translation compare

`--direction en-es` (the default) or `es-en` picks the languages: each direction has
its own vocabularies, runs and metrics; the steps that load a model take the latest
run of the direction given. `--pairs FILE --languages en-fr` trains on your own parallel
corpus instead, of any two languages (`data_prep/parallel.py`: a Tatoeba/Anki .zip or
.txt, a .tsv or .csv, or two aligned files), split and tokenized the same way.

Presets: `tutorial` reproduces Deep Learning with Python (2e, ch. 11) exactly (word
vocabularies, length 20, one block each, `key_dim=embed_dim`, rmsprop); `cpu` is the
best model this project trains in about an hour on a 2-core CPU (WordPiece, 2+2
pre-LN blocks, label smoothing, Noam schedule, length bucketing, bfloat16); `gpu`
is a larger model with mixed precision for a GPU. Each training is one MLflow run
with per-epoch BLEU/chrF on a fixed validation sample; `evaluate` scores the test
split (all references of each source sentence) with greedy and beam decoding.
The machinery (tokenization, batches, models, cached decoding) is `workflows/seq2seq/`.
"""

import importlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_prep import cache, parallel, spa_eng
from data_prep.pair_tokens import (
    TOKENIZATIONS,
    Tokenizer,
    load_tokenizer,
    references,
    token_arrays,
)
from process.commands import run_main
from workflows.core.cli import LessonCLI
from workflows.core.config import ConfigError
from workflows.core.lesson import Built, Lesson, ModelExport, RunDataset, dataset_digest
from workflows.core.step_inputs import check_texts, read_texts
from workflows.core.whole_lesson import WholeLesson, add_whole_lesson
from workflows.seq2seq.presets import (  # noqa: F401  the lesson's API: make_config & co
    CATALOG,
    EXPERIMENT,
    MAX_BEAM_WIDTH,
    TranslationConfig,
    beam_width_flag,
    check_beam_width,
    check_length_penalty,
    check_limit,
    check_n_best,
    length_penalty_flag,
    make_config,
)

PYFUNC_FILE = Path(__file__).parent / "seq2seq" / "pyfunc.py"
EXAMPLES = {
    "en-es": ["I love reading books.", "How are you?", "Where is the train station?",
              "She didn't want to go to school today."],
    "es-en": ["Me encanta leer libros.", "¿Cómo estás?", "¿Dónde está la estación de tren?",
              "Ella no quería ir a la escuela hoy."],
}


# ## Prepare the data
# Pairs, a split that keeps every sentence of either language in one split,
# vocabularies per direction, then token ids (cached).


def prepare(spa_eng_path=None, work_dir=None, tokenizations=TOKENIZATIONS,
            directions=None, joint_vocabulary_size=8000, corpus=None):
    """Pairs (spa-eng, or the user's `corpus`), splits, vocabularies and cached token ids
    of `directions` (default: both); prints a summary."""
    started = time.perf_counter()
    prepared = spa_eng.prepare(spa_eng_path, spa_eng.SpaEngSettings(), work_dir,
                               corpus=corpus)
    components = prepared.summary["pair_components"]
    print(f"Split by {components['count']:,} connected components of the pair graph "
          f"(largest: {components['largest']} pairs); no sentence of either language is in "
          "two splits")
    for direction in directions or spa_eng.directions(prepared.languages):
        prepared.check_direction(direction)
        source, target = map(parallel.language_name, spa_eng.languages(direction))
        for kind in tokenizations:
            tokenizer = load_tokenizer(prepared, kind, direction=direction,
                                       joint_vocabulary_size=joint_vocabulary_size,
                                       work_dir=work_dir)
            arrays = token_arrays(prepared, tokenizer, work_dir)
            lengths = [len(row) for row in arrays["train"][1]]
            print(f"{direction} {kind}: vocabularies {tokenizer.vocabulary_sizes[0]:,} {source} "
                  f"/ {tokenizer.vocabulary_sizes[1]:,} {target}; {target} train sentences "
                  f"{np.mean(lengths) - 2:.1f} tokens on average, 99th percentile "
                  f"{np.percentile(lengths, 99) - 2:.0f}")
    cache.print_summary(prepared, started)
    return prepared


@dataclass
class TranslationData:
    """Tokenized splits for one config."""

    prepared: spa_eng.PreparedSpaEng
    tokenizer: Tokenizer
    arrays: dict  # split -> (source id rows, target id rows)

    @property
    def fingerprint(self):
        vocabulary = "\n".join(self.tokenizer.source_vocabulary + self.tokenizer.target_vocabulary)
        return (f"{self.prepared.directory.name}:{self.tokenizer.kind}:"
                f"{cache.settings_key(vocabulary)}")

    def batches(self, config, split, epoch=None, limit=None):
        from workflows.seq2seq.batching import PairBatches, batch_plan, truncate

        source, target = self.arrays[split]
        source = truncate(source[:limit], config.sequence_length)
        target = truncate(target[:limit], config.sequence_length + 1, keep_last=True)
        seed = None if epoch is None else config.seed + epoch
        return PairBatches(source, target, batch_plan(config), seed)


def load_data(config, spa_eng_path=None, work_dir=None, corpus=None):
    prepared = spa_eng.prepare(spa_eng_path, spa_eng.SpaEngSettings(), work_dir, verbose=False,
                               corpus=corpus)
    prepared.check_direction(config.direction)
    tokenizer = load_tokenizer(prepared, config.tokenization, config.sequence_length,
                               config.direction, config.joint_vocabulary_size, work_dir)
    return TranslationData(prepared, tokenizer, token_arrays(prepared, tokenizer, work_dir))


# ## Build the model
# One module of `seq2seq/` per model family, its Keras model and `build(config, ...)`;
# `TranslationConfig` and its presets are `seq2seq/presets.py`; decoding, the saved
# translator and the batches both train on, `seq2seq/translator.py` (no MLflow or
# TensorFlow there: a GPU machine trains and decodes from the prepared arrays on JAX).

FAMILIES = {"transformer": "transformer", "gru_seq2seq": "gru"}  # --model -> its module


def build_model(config, source_vocab_size, target_vocab_size):
    """The compiled translator: masked (label-smoothed) cross-entropy, Adam with the
    Noam schedule or the tutorial's RMSprop, in the config's precision."""
    import keras

    import layers
    from workflows.core import precision

    precision.use_precision(config.dtype_policy)
    precision.use_random_generator(config.random_generator)
    family = importlib.import_module(f"workflows.seq2seq.{FAMILIES[config.model]}")
    model = family.build(config, source_vocab_size, target_vocab_size)
    rate = {"noam": lambda: layers.NoamSchedule(config.embed_dim, config.warmup_steps,
                                                scale=config.learning_rate),
            "cosine": lambda: layers.WarmupCosineToHorizon(config.learning_rate,
                                                           config.warmup_share),
            "constant": lambda: config.learning_rate}[config.schedule]()
    optimizer = keras.optimizers.Adam(rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9) \
        if config.optimizer == "adam" else keras.optimizers.RMSprop(rate)
    if config.schedule == "cosine":
        rate.attach(optimizer)  # sized to the run as it trains (`core/fitting.py`)
    model.compile(optimizer=optimizer, loss=layers.MaskedCrossentropy(config.label_smoothing),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                  steps_per_execution=config.steps_per_execution)
    return model


def make_translator(config, model, tokenizer):
    from workflows.seq2seq.translator import Translator

    return Translator(model, tokenizer, config.sequence_length, config.sequence_length + 1,
                      config.beam_width)


# ## Train
# The lesson's hooks: the data, the model, a resumable fit that also decodes a fixed
# validation sample each epoch (its BLEU and chrF logged), the export of the
# translator. `core/training.py` runs them in that order, in a tracked run.


class TranslationLesson(Lesson):
    """The lesson's hooks, in the order `core/training.py` runs them."""

    experiment, catalog, packages = EXPERIMENT, CATALOG, ("seq2seq",)
    exported = ("workflows.seq2seq.exported", "translator")  # the export step's network
    compare_columns = ("run_id", "params.direction", "params.model", "params.preset",
                       "params.tokenization", "params.parameters", "metrics.train_minutes",
                       "metrics.best_val_bleu", "metrics.test_greedy_normalized_bleu",
                       "metrics.test_beam4_normalized_bleu", "metrics.test_beam4_bleu",
                       "metrics.test_beam4_chrf", "metrics.mean_target_tokens_per_second",
                       "start_time")
    sort_by = "metrics.test_beam4_normalized_bleu"

    def complete_config(self, config):
        try:
            spa_eng.languages(config.direction)
        except ValueError as error:
            raise ConfigError(f"{error}.") from None
        return config

    def load_data(self, config, place):
        return load_data(config, place.path, place.work_dir, corpus_of(place.options))

    def datasets(self, config, data, place):
        rows = {"train": len(data.arrays["train"][0]),
                "val": min(len(data.arrays["val"][0]), config.validation_pairs)}
        return [RunDataset(f"{data.prepared.name} {config.direction} {split}",
                           dataset_digest(data.fingerprint, split, rows[split]),
                           str(data.prepared.directory), context, rows[split])
                for split, context in (("train", "training"), ("val", "validation"))]

    def build(self, config, data, place):
        model = build_model(config, *data.tokenizer.vocabulary_sizes)
        corpus = corpus_of(place.options)
        return Built(model, make_translator(config, model, data.tokenizer),
                     params={"parameters": model.count_params(),
                             **({"pairs": json.dumps(corpus.files),
                                 "languages": "-".join(corpus.languages)} if corpus else {})},
                     tags={"model_family": config.model, "preset": config.preset,
                           "direction": config.direction, "corpus": data.prepared.name},
                     artifacts=vocabulary_artifacts(data.tokenizer))

    def fit(self, training, config, data, built):
        from workflows.core import batches
        from workflows.seq2seq import evaluation

        validation = data.batches(config, "val", limit=config.validation_pairs)
        training.fit(lambda epoch: batches.for_backend(data.batches(config, "train", epoch)),
                     batches.for_backend(validation), len(data.arrays["train"][0]),
                     epoch_end=evaluation.validation_sample_scores(config, data, built.parts),
                     curves=("loss", "accuracy", "normalized_bleu"))

    def export(self, config, data, built):
        from workflows.seq2seq.translator import PYFUNC_PARAMS

        return ModelExport("translator", built.parts.save, PYFUNC_FILE, ["How are you?"],
                           packages=("seq2seq",), params=PYFUNC_PARAMS)


LESSON = TranslationLesson()


def corpus_of(options):
    """The user's `ParallelCorpus` of the `--pairs`/`--languages` options (or a run's
    params), None for spa-eng."""
    pairs = options.get("pairs")
    if isinstance(pairs, str):  # a run's params
        pairs = json.loads(pairs)
    return parallel.ParallelCorpus.of(pairs, options.get("languages"))


def vocabulary_artifacts(tokenizer):
    return {"vocabulary/source.txt": "\n".join(tokenizer.source_vocabulary),
            "vocabulary/target.txt": "\n".join(tokenizer.target_vocabulary)}


# ## Evaluate and translate


def split_references(config, split, spa_eng_path=None, work_dir=None, limit=None,
                     corpus=None):
    """(data, sources, references) of `split` in the config's direction: each distinct
    source once with all its references, the first `limit` of them."""
    data = load_data(config, spa_eng_path, work_dir, corpus)
    sources, refs = references(data.prepared.pairs(split, config.direction))
    return data, sources[:limit], refs[:limit]


def load_run_translator(run_id=None, model_uri=None, beam_width=None, direction=None,
                        batch_size=None):
    """(run, Translator) for a registered `model_uri`, a `run_id`, or the latest run (of
    `direction`, if given), decoding `batch_size` sentences at once."""
    from workflows.core import models, runs
    from workflows.seq2seq.translator import Translator

    check_beam_width(beam_width)
    run = runs.model_run(LESSON, run_id, model_uri,
                         {"direction": direction} if direction else None)
    with models.verified_model(run) as local:
        return run, Translator.load(local / "artifacts" / "translator", beam_width, batch_size)


def evaluate(run_id=None, spa_eng_path=None, work_dir=None, model_uri=None, limit=None,
             beam_width=None, length_penalty=None, direction=None, batch_size=None):
    """Test BLEU/chrF (greedy, beam, and beam re-ranked with `length_penalty` if given),
    masked token accuracy, samples; logged to the run."""
    from workflows.core import runs, tracking
    from workflows.seq2seq import evaluation

    check_beam_width(beam_width)
    check_length_penalty(length_penalty)
    check_limit(limit)
    if batch_size is not None and not 1 <= batch_size <= 4096:
        raise ConfigError(f"--batch-size must be from 1 to 4096 sentences, got {batch_size}.")
    run, translator = load_run_translator(run_id, model_uri, direction=direction,
                                          batch_size=batch_size)
    config = runs.config_of(LESSON, run)
    beam_width = beam_width or config.beam_width
    test = split_references(config, "test", spa_eng_path, work_dir, limit,
                            corpus_of(run.data.params))
    data, sources, _ = test
    tracking.log_datasets([RunDataset(
        f"{data.prepared.name} {config.direction} test",
        dataset_digest(data.fingerprint, "test", limit),
        str(data.prepared.directory), "test", len(sources))], run.info.run_id)
    return evaluation.score_and_log(run, translator, config, test, beam_width,
                                    length_penalty)


def translate(texts, run_id=None, model_uri=None, beam_width=None, n_best=None,
              length_penalty=None, direction=None):
    """Prints and returns the translation of each text (by the latest run of `direction`
    unless a run or model is given); with `n_best`, its `n_best` best translations and
    their scores (log-likelihood over Wu et al.'s length penalty with alpha
    `length_penalty`)."""

    check_texts(texts, "sentence")
    check_n_best(n_best)
    check_length_penalty(length_penalty)
    _, translator = load_run_translator(run_id, model_uri, beam_width, direction)
    if n_best:
        outputs = translator.n_best(list(texts), n_best, length_penalty=length_penalty)
        for text, hypotheses in zip(texts, outputs, strict=True):
            print(text + "".join(f"\n  {score:8.3f}  {output}" for output, score in hypotheses))
        return outputs
    outputs = translator.translate(list(texts), length_penalty=length_penalty)
    for text, output in zip(texts, outputs, strict=True):
        print(f"{text}\n  -> {output}")
    return outputs


def score(lines, run_id=None, model_uri=None, direction=None):
    """Prints and returns `(log-likelihood, tokens)` of each `SOURCE<TAB>TARGET` (or
    `SOURCE ||| TARGET`) line under a run's model: how likely the model finds that
    translation, to rank or filter pairs."""
    pairs = read_pairs(lines)
    _, translator = load_run_translator(run_id, model_uri, direction=direction)
    scores = translator.score([source for source, _ in pairs], [target for _, target in pairs])
    print("log_likelihood\ttokens\tper_token\tsource\ttarget")
    for (source, target), (total, tokens) in zip(pairs, scores, strict=True):
        print(f"{total:.4f}\t{tokens}\t{total / tokens:.4f}\t{source}\t{target}")
    mean = sum(total for total, _ in scores) / sum(tokens for _, tokens in scores)
    print(f"# {len(pairs)} pair(s): mean log-likelihood per token {mean:.4f} "
          f"(perplexity {np.exp(-mean):.2f})")
    return scores


def read_pairs(lines):
    """`(source, target)` from `SOURCE<TAB>TARGET` or `SOURCE ||| TARGET` lines."""
    from workflows.seq2seq.translator import parse_pair

    pairs = []
    for number, line in enumerate(lines, start=1):
        try:
            pairs.append(parse_pair(line))
        except ValueError as error:
            raise ConfigError(f"Pair {number}: {error}.") from None
    return pairs


def compare(sort_by=None, model=None, since=None, style="text", ascending=False,
            direction=None):
    """Prints this lesson's runs (of `direction`, if given) as a table, best first;
    returns the rows."""
    from workflows.core import runs

    return runs.compare(LESSON, sort_by, model, since, style, ascending,
                        {"direction": direction} if direction else None)


# ## Command line


def direction_of_pairs(args):
    """With `--languages A-B` and no `--direction`, the direction is A-B."""
    corpus = corpus_of(CLI.data_place(args).options)
    if corpus and getattr(args, "direction", None) is None:
        args.direction = "-".join(corpus.languages)


CLI = LessonCLI(LESSON, "workflows.translation", __doc__.split("\n")[0], spa_eng.SPA_ENG,
                shortcuts=("direction", "attention", "batch_tokens"),
                switches=("attention",), run_filters=("direction",),
                data_options=("pairs", "languages"),
                data_arguments=parallel.add_pairs_arguments,
                flag_checks={"beam_width": check_beam_width, "n_best": check_n_best,
                             "length_penalty": check_length_penalty, "limit": check_limit})
CLI.step("prepare", "pairs, splits, vocabularies, token ids of every tokenization (both "
         "directions, or one)",
         lambda a: prepare(a.spa_eng_path, a.work_dir,
                           directions=(a.direction,) if a.direction else None,
                           corpus=corpus_of(CLI.data_place(a).options)),
         data=True).add_argument("--direction",
                                 help="prepare the token ids of one direction only")
CLI.step("train", "train one translator (resumes an interrupted run)", CLI.train, data=True,
         train="one", check=direction_of_pairs)
add_whole_lesson(CLI, "prepare, train, evaluate and translate", WholeLesson(
    prepare=lambda a, configs: prepare(
        a.spa_eng_path, a.work_dir, (configs[0].tokenization,), (configs[0].direction,),
        configs[0].joint_vocabulary_size, corpus_of(CLI.data_place(a).options)),
    evaluate=lambda a, run_id: evaluate(run_id, a.spa_eng_path, a.work_dir, limit=a.limit),
    use=lambda a, config, run_id, prepared: translate(EXAMPLES.get(config.direction) or (
        references(prepared.pairs("test", config.direction))[0][:4]), run_id)),
    check=direction_of_pairs).add_argument("--limit", type=int,
                                           help="evaluate on the first N test sentences")
_evaluate = CLI.step("evaluate", "test BLEU/chrF of a run, logged to it", lambda a: evaluate(
    a.run_id, a.spa_eng_path, a.work_dir, a.model_uri, a.limit, a.beam_width,
    a.length_penalty, a.direction, a.batch_size), data=True, model=True)
_evaluate.add_argument("--limit", type=int, help="only the first N test sentences")
_evaluate.add_argument("--batch-size", type=int, metavar="N", help="sentences decoded at "
                       "once (default 128; a GPU decodes 512 or more in the same time)")
beam_width_flag(_evaluate)
length_penalty_flag(_evaluate, "also score the beams re-ranked")
_translate = CLI.step(
    "translate", "translate sentences with a run's model", lambda a: translate(
        read_texts(a.texts, a.file, "sentences"), a.run_id, a.model_uri, a.beam_width,
        a.n_best, a.length_penalty, a.direction), model=True,
    texts="sentences in the run's source language",
    check=lambda a: read_texts(a.texts, a.file, "sentences"))
beam_width_flag(_translate)
_translate.add_argument("--n-best", type=int, metavar="K", help="print the K best "
                        "translations with their scores (beam width at least K)")
length_penalty_flag(_translate, "rank beams")
CLI.step("score", "log-likelihood of sentence pairs under a run's model (to rank or filter)",
         lambda a: score(read_texts(a.texts, a.file, "sentence pairs"), a.run_id, a.model_uri,
                         a.direction), model=True,
         texts="pairs as 'SOURCE ||| TARGET' (a --file may also use SOURCE<TAB>TARGET)")
CLI.shared_steps()
main = CLI.main

if __name__ == "__main__":
    run_main(main)
