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

import numpy as np

from data_prep.text import PAD_ID
from workflows.core.export import Exportable
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
                "length, target vocabulary): the last position's choose the next token")
