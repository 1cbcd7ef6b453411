"""Batched greedy and beam decoding of a translator, with cached state.

The encoder runs once; each step feeds only the newest token to the model's
`call_with_cache` (the Transformer's decoder blocks keep their keys and values, the
GRU its state), driven by keras-hub's `GreedySampler` or `BeamSampler`. Beams that
have finished (`end_id`, or padding after it) only extend with padding at no cost,
so finished hypotheses keep their score. `generate_all_beams` returns every beam with
its log-likelihood, which `rank_hypotheses` re-ranks with a length penalty (n-best).
"""

import keras_hub
import numpy as np
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

    def generate_all_beams(self, source, max_length, beam_width):
        """Every beam: token ids `(batch, beam_width, max_length)` (padding after each
        end) and their log-likelihoods `(batch, beam_width)`, most likely first."""
        sampler = keras_hub.samplers.BeamSampler(num_beams=beam_width, return_all_beams=True)
        tokens, log_probs = self.sample(sampler, source, max_length, pad=False)
        flat = self.pad_after_end(ops.reshape(tokens, (-1, max_length)))
        return ops.reshape(flat, ops.shape(tokens)), log_probs

    def sample(self, sampler, source, max_length, pad=True):
        """`generate` with any keras-hub sampler (`pad=False`: its output as it is)."""
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
        return self.pad_after_end(tokens) if pad else tokens

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


def length_penalty(lengths, alpha):
    """Wu et al. (2016): `((5 + length) / 6) ** alpha`; alpha 0 divides by 1."""
    return ((5.0 + np.asarray(lengths, "float64")) / 6.0) ** alpha


def rank_hypotheses(tokens, log_probs, alpha=0.0):
    """Per sentence, its distinct beams as `(token ids, score)`, best first: the
    log-likelihood divided by `length_penalty` of the tokens generated (the end token
    included). `tokens` `(batch, beams, length)` starts each beam with `[start]` and
    pads after its end; beams the search could not fill (log-likelihood about -1e9
    or lower) are dropped."""
    ranked = []
    for beams, scores in zip(np.asarray(tokens), np.asarray(log_probs, "float64"), strict=True):
        lengths = (beams[:, 1:] != PAD_ID).sum(axis=1)
        penalized = scores / length_penalty(lengths, alpha)
        seen, row = set(), []
        for beam in np.argsort(-penalized, kind="stable"):
            key = beams[beam].tobytes()
            if scores[beam] > NEG_INF / 2 and key not in seen:
                seen.add(key)
                row.append((beams[beam], float(penalized[beam])))
        ranked.append(row)
    return ranked
