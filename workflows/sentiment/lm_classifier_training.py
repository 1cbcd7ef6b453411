"""Training plan of the classifier on a language model's GPT (`--model lm_classifier`)."""

import dataclasses

from data_prep.padding import pad_rows
from workflows.causal_lm import source as lm_source
from workflows.core.config import ConfigError
from workflows.core.lesson import TrainingPlan
from workflows.sentiment.presets import LM_ARCHITECTURE, build_model
from workflows.sentiment.subword_classifier import SubwordClassifier, token_rows


def complete_config(config):
    """`config` with the language-model run it starts from (`init_from`, as a run id),
    and that run's architecture, vocabulary size and dtype policy."""
    if not config.init_from:
        raise ConfigError("lm_classifier fine-tunes a language model: give --init-from with "
                          "a run id or model URI from `python -m workflows.language_model`.")
    run = lm_source.source_run(config.init_from)
    source = lm_source.source_config(run)
    return dataclasses.replace(config, init_from=run.info.run_id,
                               **{name: getattr(source, name) for name in LM_ARCHITECTURE})


def plan(config, prepared, batches_of, export):
    """The language model's GPT and WordPiece vocabulary under a classifier head; reviews
    read as its subword tokens. `batches_of(ids, labels, seed)` batches a split by
    length; `export` says how the classifier is logged (its `save` is filled in here)."""
    generator = lm_source.load_generator(lm_source.source_run(config.init_from))
    print(f"Tokenizing the reviews with the vocabulary of run {config.init_from}")
    splits = {}
    for split in ("train", "val"):
        rows = token_rows(generator.tokenizer, prepared.texts(split), config.max_review_tokens)
        splits[split] = (pad_rows(rows, config.max_review_tokens), prepared.labels(split))

    def split_batches(split, epoch=None):
        return batches_of(*splits[split], None if epoch is None else config.seed + epoch)

    model = build_model(config, config.vocabulary_size, generator.model,
                        len(split_batches("train", 0)))
    classifier = SubwordClassifier(model, generator.vocabulary, config.max_review_tokens)
    return TrainingPlan(
        model, lambda epoch: split_batches("train", epoch), split_batches("val"),
        len(prepared.labels("train")), export=dataclasses.replace(export, save=classifier.save),
        tags={"model_family": "lm_classifier", "pretrained": str(config.pretrained).lower()},
        artifacts={"vocabulary.txt": "\n".join(generator.vocabulary)})
