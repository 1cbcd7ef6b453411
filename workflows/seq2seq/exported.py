"""A translator as the export takes it (`core/export.py`): its network,
`{source: ids (batch, source length), target: ids (batch, target length)} -> logits
(batch, target length, target vocabulary)`, the encoder and the decoder in one graph (the
logits at position i read the target tokens up to i), with both vocabularies and the
decoding's settings beside it.

Greedy decoding in the format's runtime feeds `[start]` and then each chosen token back
as the target, running the whole network once per token (no cache: the kit's cached
greedy and beam search are Python around the network), and ends at `[end]`; the source
ids are the kit's tokenization (`source_vocabulary.json`; word tokenization: the
tutorial's lowercased words, its punctuation stripped; subword: WordPiece pieces).
"""

import json
from pathlib import Path

import numpy as np

from data_prep.text import PAD_ID
from workflows.core.export import Exportable, load_export, named_arrays
from workflows.seq2seq.batching import truncate
from workflows.seq2seq.translator import Translator, non_empty

EXAMPLE_SENTENCE = "How are you?"


def exportable(run, folder):
    """The `Exportable` of `run`'s translator, saved in `folder` (its `translator/`)."""
    translator = Translator.load(folder)
    tokenizer = translator.tokenizer
    (source,) = truncate(tokenizer.source_ids([EXAMPLE_SENTENCE]), translator.max_source_length)
    example = {"source": np.asarray([non_empty(source)], "int32"),
               "target": np.asarray([[tokenizer.start_id]], "int32")}
    return Exportable(translator.model, example, {
        "source_vocabulary.json": tokenizer.source_vocabulary,
        "target_vocabulary.json": tokenizer.target_vocabulary,
        "generation.json": {
            "start_id": tokenizer.start_id, "end_id": tokenizer.end_id,
            "never_ids": [PAD_ID, tokenizer.start_id], "tokenization": tokenizer.kind,
            "direction": tokenizer.direction,
            "max_source_length": translator.max_source_length,
            "max_output_length": translator.max_output_length,
            "example_sentence": EXAMPLE_SENTENCE}},
        outputs="the next target token's logits at every target position (batch, target "
                "length, target vocabulary): the last position's choose the next token",
        float_layers=("embedding",))  # int8 embeddings cost 4.4 BLEU (export_translation.json)


def greedy_ids(answer, names, settings, source):
    """Each row's target ids (`[start]` first) for a batch of padded `source` ids, decoded
    greedily through `answer` (`core.export.load_export`) as the docs' loop does:
    `[start]`, then each row's likeliest allowed token fed back, the whole network once
    per token, until every row chose `[end]` (then padding)."""
    target = np.full((len(source), 1), settings["start_id"], "int32")
    done = np.zeros(len(source), bool)
    while target.shape[1] < settings["max_output_length"] and not done.all():
        logits = np.array(answer(named_arrays({"source": np.asarray(source, "int32"),
                                               "target": target}, names)))[:, -1]
        logits[:, settings["never_ids"]] = -np.inf
        chosen = np.where(done, PAD_ID, logits.argmax(axis=1)).astype("int32")
        done |= chosen == settings["end_id"]
        target = np.concatenate([target, chosen[:, None]], axis=1)
    return list(target)


class ExportedTranslator:
    """`translator` (a `Translator`) answering through its export in `folder`: the same
    sentences in, greedy translations out, decoded by the format's own runtime in the
    translator's batches (`Translator.in_batches`)."""

    def __init__(self, folder, translator):
        self.answer, self.names = load_export(folder)
        self.settings = json.loads((Path(folder) / "generation.json").read_text("utf-8"))
        self.translator = translator

    def translate(self, texts):
        outputs, todo, source = self.translator.read_sources(texts)
        tokenizer = self.translator.tokenizer
        decoded = self.translator.in_batches(source, lambda ids: tokenizer.detokenize(
            greedy_ids(self.answer, self.names, self.settings, ids)))
        for i, text in zip(todo, decoded, strict=True):
            outputs[i] = text
        return outputs
