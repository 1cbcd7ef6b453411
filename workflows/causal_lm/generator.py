"""The exported language model: a folder that continues prompts with any keras-hub sampler.

`Generator.save(folder)` writes the kit's model folder (`core/model_folder.py`: the
model, its WordPiece vocabulary, the settings); `Generator.load(folder)` gives back an object whose
`generate(["The movie was"], sampler="top_p", top_p=0.9, temperature=0.8, seed=1)`
returns the continuations. Every prompt starts after `[END]`, the token that ends each
training document, so generating is starting a new document.
"""

import re
from functools import cached_property, partial

import numpy as np
from keras import ops

import layers  # noqa: F401  registers the layers a saved model uses
from data_prep.text import SPECIAL_TOKENS, make_wordpiece_tokenizer
from workflows.causal_lm.models import GPT  # noqa: F401  registered: a saved model is one
from workflows.causal_lm.sampling import Sampling
from workflows.core.compilation import compiled
from workflows.core.model_folder import read_folder, save_folder

KIND = "generator"
END_ID, PAD_ID = SPECIAL_TOKENS.index("[END]"), SPECIAL_TOKENS.index("[PAD]")
NEVER_IDS = [SPECIAL_TOKENS.index(t) for t in ("[PAD]", "[UNK]", "[START]")]
NEG_INF = -1e9
BATCHES = (8, 32)  # the batch sizes generation runs in (larger inputs: chunks of the last)
LENGTH_STEP = 32  # prompt + continuation arrays are a multiple of this long
_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]'’]|n't|'s|'re|'ve|'ll|'d|'m)")
_SPACE_AFTER = re.compile(r"([(\[]) ")
_INSIDE_WORD = re.compile(r"(\w) ([-'’]) (\w)")  # don ' t -> don't, well - made -> well-made


class Generator:
    def __init__(self, model, vocabulary):
        self.model, self.vocabulary = model, list(vocabulary)
        self._step = compiled(self._cached_step, model)
        self._loops, self._forward = {}, None

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    @staticmethod
    def training_loss():
        return layers.MaskedCrossentropy()

    @cached_property
    def tokenizer(self):
        """The WordPiece tokenizer (TensorFlow), made on first use: generating from token
        ids (`continue_ids`) needs none."""
        return make_wordpiece_tokenizer(self.vocabulary)

    def tokenize(self, prompts):
        """Token id lists of the prompt strings."""
        return [np.asarray(ids).tolist() for ids in self.tokenizer(list(prompts))] \
            if prompts else []

    def generate(self, prompts, sampling=None):
        """The continuation of each prompt (text after the prompt, up to `[END]`)."""
        sampling = (sampling or Sampling()).check()
        bad = [i for i, prompt in enumerate(prompts) if not isinstance(prompt, str)]
        if bad:
            raise TypeError(f"Prompts must be strings; items {bad[:10]} are not.")
        return self.continue_ids(self.tokenize(prompts), sampling)

    def continue_ids(self, rows, sampling=None):
        """The continuation (text) of each prompt given as a list of token ids.

        Prompts go through in batches of a few fixed shapes (`BATCHES` rows, arrays a
        multiple of `LENGTH_STEP` long), so a generator compiles a handful of sampling
        programs whatever the prompts; the rows that fill a batch repeat its first prompt
        and are dropped, and any tokens past `max_new_tokens` are cut.
        """
        sampling = (sampling or Sampling()).check()
        rows = list(rows)
        chunks = [rows[start:start + BATCHES[-1]] for start in range(0, len(rows), BATCHES[-1])]
        return [text for chunk in chunks for text in self._continue_batch(chunk, sampling)]

    def _continue_batch(self, rows, sampling):
        tokens, lengths = self._prompt_array(rows, sampling.max_new_tokens)
        size = next(size for size in BATCHES if size >= len(rows))
        tokens = np.concatenate([tokens, np.repeat(tokens[:1], size - len(rows), axis=0)])
        full_lengths = np.concatenate([lengths, np.repeat(lengths[:1], size - len(rows))])
        mask = np.arange(tokens.shape[1])[None, :] < full_lengths[:, None]
        if sampling.seed is None:  # the whole loop compiled (XLA) once per setting and shape
            if sampling not in self._loops:
                sampler = sampling.make_sampler()
                self._loops[sampling] = compiled(partial(self._sample, sampler), self.model,
                                                 sampler, jit_compile=True,
                                                 name=f"generate_{sampling.sampler}")
            output = self._loops[sampling](tokens, mask)
        else:  # a fresh seeded sampler per call, so a seed repeats its choices
            output = self._sample(sampling.make_sampler(), tokens, mask)
        output = ops.convert_to_numpy(output)
        new = sampling.max_new_tokens
        return [self.detokenize(row[length:length + new])
                for row, length in zip(output[:len(rows)], lengths, strict=True)]

    def _sample(self, sampler, tokens, mask):
        """Fills the cache with the prompts, then samples up to the array's length."""
        tokens = ops.convert_to_tensor(tokens, "int32")
        mask = ops.convert_to_tensor(mask, "bool")
        index = ops.min(ops.sum(ops.cast(mask, "int32"), axis=1))
        cache = self.model.initial_cache(ops.shape(tokens)[0], ops.shape(tokens)[1])
        _, cache = self.model.call_with_cache(tokens, cache, 0)
        return sampler(self._next, tokens, cache=cache, index=index, mask=mask,
                       stop_token_ids=[END_ID], model=self.model)  # JAX: current weights

    def generate_uncached(self, rows, max_new_tokens):
        """Greedy continuations of prompt token ids (one length) that re-run the whole
        model for every new token: the baseline cached generation is measured against."""
        tokens, lengths = self._prompt_array(rows, max_new_tokens)
        if len(set(lengths)) != 1:
            raise ValueError("The uncached baseline takes prompts of one length.")
        length = int(lengths[0])
        tokens = tokens[:, :length + max_new_tokens]  # the array may be longer: few shapes
        if self._forward is None:
            # without XLA: with it, this loop ran slower here (22.2 against 19.4 ms/token)
            self._forward = compiled(lambda ids: self.model(ids, training=False), self.model)
        for index in range(length, tokens.shape[1]):
            # the prefix, padded to a multiple of 16 (few shapes to compile; causal, so
            # padding after `index` changes nothing before it)
            ids = tokens[:, :min(-(-index // 16) * 16, tokens.shape[1])]
            logits = ops.convert_to_numpy(self._forward(ids))
            tokens[:, index] = np.argmax(self._allowed(logits[:, index - 1, :]), axis=-1)
        return [self.detokenize(row[length:]) for row in tokens]

    def _prompt_array(self, rows, max_new_tokens):
        """Prompt ids after `[END]` (the start of a document), left-aligned in an array
        long enough for `max_new_tokens` more; overlong prompts keep their end."""
        limit = self.model.max_length - 1
        rows = [[END_ID, *ids][-max(1, limit - max_new_tokens + 1):] for ids in rows]
        lengths = np.asarray([len(row) for row in rows])
        needed = int(lengths.max()) + max_new_tokens
        total = min(-(-needed // LENGTH_STEP) * LENGTH_STEP, self.model.max_length)
        tokens = np.zeros((len(rows), total), "int32")
        for i, row in enumerate(rows):
            tokens[i, :len(row)] = row
        return tokens, lengths

    def _next(self, prompt, cache, index):
        """keras-hub sampler callback: logits for position `index` from token `index - 1`."""
        token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
        return (*self._step(token, cache, index - 1),)

    def _cached_step(self, token, cache, index):
        logits, cache = self.model.call_with_cache(token, cache, index)
        return self._allowed(logits[:, 0, :]), None, cache

    @staticmethod
    def _allowed(logits):
        """Never padding, `[UNK]` or `[START]` (which no training document holds)."""
        vocabulary = np.arange(logits.shape[-1])
        never = np.isin(vocabulary, NEVER_IDS)
        return ops.where(never[None, :], NEG_INF, logits)

    def detokenize(self, ids):
        """Text of `ids` up to the first `[END]`, WordPiece pieces joined, spaces tidied."""
        ids = [int(i) for i in ids]
        ids = ids[:ids.index(END_ID)] if END_ID in ids else ids
        words = [self.vocabulary[i] for i in ids if i != PAD_ID]
        text = " ".join(words).replace(" ##", "").removeprefix("##")
        text = _INSIDE_WORD.sub(r"\1\2\3", text)
        return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text)).strip()

    def save(self, folder):
        return save_folder(folder, self.model, KIND, {"max_length": self.model.max_length},
                           {"vocabulary": self.vocabulary})

    @classmethod
    def load(cls, folder):
        """A saved generator (another version's folder: one line saying to train again)."""
        model, _, vocabularies = read_folder(folder, [KIND])
        return cls(model, vocabularies["vocabulary"])


def load_generator(folder):
    """The saved generator in `folder`: the kit's GPT, or a keras-hub model (`hub.py`)."""
    from workflows.causal_lm import hub

    if hub.is_saved_hub_generator(folder):
        return hub.HubGenerator.load(folder)
    return Generator.load(folder)

