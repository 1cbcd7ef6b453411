"""A language model as the export takes it (`core/export.py`): its next-token step,
`token_ids (batch, length) -> logits (batch, length, vocabulary)` (causal: the logits at
position i read the tokens up to i), with how to tokenize and decode beside it.

A greedy continuation in the format's runtime runs the whole step once per new token
(no key/value cache: the cached loop is Python around the network), as the kit's
`Generator.generate_uncached` does. The kit's GPT: `vocabulary.json` (its WordPiece
pieces) and `generation.json` (each prompt starts after `[END]`; `[PAD]`, `[UNK]` and
`[START]` never chosen). A keras-hub model: the preset's tokenizer files under
`tokenizer/` and its start and end ids.
"""

from pathlib import Path

import numpy as np

from workflows.causal_lm.generator import END_ID, NEVER_IDS, load_generator
from workflows.causal_lm.hub import HubGenerator
from workflows.core.export import Exportable

EXAMPLE_PROMPT = "The movie was"


def exportable(run, folder):
    """The `Exportable` of `run`'s language model, saved in `folder` (its `generator/`)."""
    generator = load_generator(folder)
    if isinstance(generator, HubGenerator):
        tokens = generator.tokens
        first, end, never = tokens.start, tokens.end_id, []
        prompt = first + tokens.ids([EXAMPLE_PROMPT])[0]
        beside, copies = {"tokenizer.json": generator.task.preprocessor.tokenizer.get_config()}, {
            f"tokenizer/{path.name}": path
            for path in sorted((Path(folder) / "assets" / "tokenizer").glob("*"))}
        # rotary positions have no limit: the length it was trained on
        limit = generator.max_length or int(run.data.params["sequence_length"])
    else:
        first, end, never = [END_ID], END_ID, NEVER_IDS
        prompt = first + generator.tokenize([EXAMPLE_PROMPT])[0]
        beside, copies = {"vocabulary.json": generator.vocabulary}, {}
        limit = generator.model.max_length
    beside["generation.json"] = {"first_ids": first, "end_id": end, "never_ids": never,
                                 "max_length": limit, "example_prompt": EXAMPLE_PROMPT}
    return Exportable(generator.model, np.asarray([prompt], "int32"), beside,
                      outputs="the next token's logits at every position (batch, length, "
                              "vocabulary): the last position's are the next token's",
                      copies=copies)
