"""Batched greedy and beam decoding of a translator, with cached state.

The encoder runs once; each step feeds only the newest token to the model's
`call_with_cache` (the Transformer's decoder blocks keep their keys and values, the
GRU its state), driven by keras-hub's `GreedySampler` or `BeamSampler`. Beams that
have finished (`end_id`, or padding after it) only extend with padding at no cost,
so finished hypotheses keep their score.
"""

import keras_hub
from keras import ops

from workflows.seq2seq.models import PAD_ID

NEG_INF = -1e9


class Decoder:
    """Decodes with a `TransformerTranslator` or `GRUTranslator`."""

    def __init__(self, model, start_id, end_id):
        self.model, self.start_id, self.end_id = model, start_id, end_id

    def generate(self, source, max_length, beam_width=1):
        """Token ids `(batch, max_length)`: `[start]`, the generated tokens, then padding."""
        sampler = (keras_hub.samplers.GreedySampler() if beam_width == 1
                   else keras_hub.samplers.BeamSampler(num_beams=beam_width))
        return self.sample(sampler, source, max_length)

    def sample(self, sampler, source, max_length):
        """`generate` with any keras-hub sampler."""
        source = ops.convert_to_tensor(source, "int32")
        batch = ops.shape(source)[0]
        prompt = ops.concatenate(
            [ops.full((batch, 1), self.start_id, "int32"),
             ops.zeros((batch, max_length - 1), "int32")], axis=1)
        mask = ops.concatenate([ops.ones((batch, 1), "bool"),
                                ops.zeros((batch, max_length - 1), "bool")], axis=1)
        tokens = sampler(self.next, prompt, cache=self.model.initial_cache(source, max_length),
                         index=1, mask=mask, stop_token_ids=[self.end_id],
                         model=self.model)  # JAX: the loop reads the current weights
        return self.pad_after_end(tokens)

    def next(self, prompt, cache, index):
        """keras-hub sampler callback: logits for position `index` from token `index - 1`."""
        previous = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
        logits, cache = self.model.call_with_cache(previous, cache, index - 1)
        return self.allowed_logits(logits, previous), None, cache

    def allowed_logits(self, logits, previous):
        """Never padding or `[start]`; only padding once a sentence has ended."""
        vocabulary = ops.arange(ops.shape(logits)[-1])
        never = ops.logical_or(vocabulary == PAD_ID, vocabulary == self.start_id)
        logits = ops.where(never[None, :], NEG_INF, logits)
        finished = ops.logical_or(ops.equal(previous, self.end_id), ops.equal(previous, PAD_ID))
        only_padding = ops.where(vocabulary == PAD_ID, 0.0, NEG_INF)
        return ops.where(finished, only_padding[None, :], logits)

    def pad_after_end(self, tokens):
        """Padding after each row's first `end_id`."""
        ended = ops.cumsum(ops.cast(ops.equal(tokens, self.end_id), "int32"), axis=1)
        after_end = ops.concatenate(
            [ops.zeros_like(ended[:, :1]), ended[:, :-1]], axis=1) > 0
        return ops.where(after_end, PAD_ID, tokens)
