"""The exported translator: a folder that turns raw source sentences into target ones.

`Translator.save(folder)` writes the kit's model folder (`core/model_folder.py`: the
model, both vocabularies, the settings); `Translator.load(folder)` gives back an object whose
`translate(["How are you?"])` returns `["¿Cómo estás?"]` (an `en-es` translator) and
whose `score` gives the log-likelihood of sentence pairs. The MLflow pyfunc
(`pyfunc.py`) and the lesson's `evaluate`/`translate`/`score` steps all go through it.
Its `Decoder` (below) runs batched greedy and beam search on the model's cached steps;
its `score` reads the pairs in the batches both models train on (`batching.py`).
"""

import logging

import keras
import keras_hub
import numpy as np
from keras import ops

import layers  # noqa: F401  registers the layers and the loss a saved model uses
from data_prep.pair_tokens import Tokenizer
from data_prep.text import PAD_ID, BucketPlan, boundaries_up_to, pad_rows
from workflows.core.compilation import compiled
from workflows.core.model_folder import read_folder, save_folder
from workflows.seq2seq.batching import PairBatches, truncate
from workflows.seq2seq.gru import GRUTranslator  # noqa: F401  registered: a saved model is one
from workflows.seq2seq.transformer import TransformerTranslator  # noqa: F401  likewise

KIND = "translator"
MAX_BEAM_WIDTH = 64  # wider beams cost time for no gain on sentences this short
# On JAX, decoding compiles one program per input shape (minutes on a GPU for a large
# model), so sources are padded to one of two lengths (this one, or the longest) and
# batches topped up to `SMALL_BATCH` or the translator's batch size: four shapes per
# decoding mode. TensorFlow's decoding graph takes any shape, so there a batch keeps its
# own size and length (no wasted rows on a CPU). Padding is masked: translations are
# the same either way.
SHORT_SOURCE = 16
SMALL_BATCH = 8
# the logged model's params; beam width 0: the translator's own; n_best 0: one translation;
# score: inputs are "source<TAB>target" pairs to score
PYFUNC_PARAMS = {"beam_width": 0, "length_penalty": 0.0, "n_best": 0, "score": False}
log = logging.getLogger(__name__)


def parse_pair(line):
    """`(source, target)` from `SOURCE<TAB>TARGET` or `SOURCE ||| TARGET`; a `ValueError`
    when a side is missing or empty."""
    fields = line.split("\t") if "\t" in line else line.split("|||")
    if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
        raise ValueError(f"{line[:60]!r} is not 'SOURCE<TAB>TARGET' or 'SOURCE ||| TARGET' "
                         "with both sides non-empty")
    return fields[0].strip(), fields[1].strip()


def non_empty(row):
    """Source ids, or one [UNK] for a sentence with none (a fully masked source)."""
    return row if len(row) else np.asarray([1], "int32")


def check_strings(texts):
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise TypeError(f"Sentences must be strings; items {bad[:10]} are not "
                        f"(e.g. {type(texts[bad[0]]).__name__}).")


class Translator:
    def __init__(self, model, tokenizer, max_source_length, max_output_length, beam_width=1,
                 batch_size=128, length_penalty=0.0):
        self.model, self.tokenizer = model, tokenizer
        self.max_source_length, self.max_output_length = max_source_length, max_output_length
        self.beam_width, self.batch_size = beam_width, batch_size
        self.length_penalty = length_penalty  # Wu et al.'s alpha; 0: plain log-likelihood
        self.decoder = Decoder(model, tokenizer.start_id, tokenizer.end_id)
        self._generate = {}

    def translate(self, texts, beam_width=None, length_penalty=None):
        """The translation of each string; empty input gives an empty string.

        Sentences longer than the model's source length are truncated (with a
        warning). Raises `TypeError` for items that are not strings.
        """
        outputs, todo, source = self.read_sources(texts)
        for i, text in zip(todo, self.translate_ids(source, beam_width, length_penalty),
                           strict=True):
            outputs[i] = text
        return outputs

    def n_best(self, texts, n, beam_width=None, length_penalty=None):
        """Per string, up to `n` distinct `(translation, score)` pairs, best first
        (beam search of width at least `n`; scores as in `rank_hypotheses`)."""
        outputs, todo, source = self.read_sources(texts)
        outputs = [[("", 0.0)] for _ in outputs]
        for i, row in zip(todo, self.n_best_ids(source, n, beam_width, length_penalty),
                          strict=True):
            outputs[i] = row
        return outputs

    def score(self, sources, targets):
        """Per pair, `(log-likelihood, tokens)`: the model's log-probability (nats) of the
        target's tokens and its end given the source, and how many tokens that is. Its
        negative sum over a batch, divided by the tokens, is the model's (unsmoothed)
        loss. Sentences longer than the model's lengths are truncated."""
        check_strings(sources)
        check_strings(targets)
        source = [non_empty(row) for row in truncate(self.tokenizer.source_ids(list(sources)),
                                                      self.max_source_length)]
        target = truncate(self.tokenizer.target_ids(list(targets)), self.max_output_length,
                          keep_last=True)
        plan = BucketPlan(boundaries_up_to(self.max_source_length),
                          self.batch_size * SHORT_SOURCE)
        batches = PairBatches(source, target, plan)
        scores = [None] * len(source)
        for index, (_, rows) in enumerate(batches.order):
            inputs, labels, weights = batches[index]
            for row, pair in zip(rows, self._token_log_probs(inputs, labels, weights),
                                 strict=True):
                if row >= 0:  # not a top-up row
                    scores[row] = pair
        return scores

    def _token_log_probs(self, inputs, labels, weights):
        logits = keras.ops.cast(self.model(inputs, training=False), "float32")
        log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))
        chosen = np.take_along_axis(log_probs, labels[..., None].astype("int64"), -1)[..., 0]
        return [(float(total), int(count)) for total, count in
                zip((chosen * weights).sum(axis=1), weights.sum(axis=1), strict=True)]

    def read_sources(self, texts):
        """(an empty output per text, the indexes of the non-empty ones, their ids)."""
        check_strings(texts)
        texts = [" ".join(text.split()) for text in texts]
        todo = [i for i, text in enumerate(texts) if text]
        source = self.tokenizer.source_ids([texts[i] for i in todo]) if todo else []
        too_long = sum(len(row) > self.max_source_length for row in source)
        if too_long:
            log.warning("%d sentence(s) longer than %d tokens were truncated.", too_long,
                        self.max_source_length)
        return [""] * len(texts), todo, source

    def translate_ids(self, source, beam_width=None, length_penalty=None):
        """The translation of each sentence given as source token ids (truncated to the
        model's source length); with a length penalty, the best re-ranked beam."""
        width = beam_width or self.beam_width
        alpha = self.length_penalty if length_penalty is None else length_penalty
        if alpha and width > 1:
            return [row[0][0] for row in self.n_best_ids(source, 1, width, alpha)]
        return self.in_batches(
            source, lambda ids: self.tokenizer.detokenize(self.generate(ids, width)))

    def n_best_ids(self, source, n, beam_width=None, length_penalty=None):
        width = max(n, beam_width or self.beam_width)
        alpha = self.length_penalty if length_penalty is None else length_penalty

        def decode(ids):
            tokens, log_probs = self.generate_all_beams(ids, width)
            rows = []
            for hypotheses in rank_hypotheses(tokens, log_probs, alpha):
                texts = self.tokenizer.detokenize(np.stack([ids for ids, _ in hypotheses]))
                distinct = {}
                for text, (_, score) in zip(texts, hypotheses, strict=True):
                    distinct.setdefault(text, score)  # two token paths, one text: the best
                rows.append(list(distinct.items())[:n])
            return rows

        return self.in_batches(source, decode)

    def in_batches(self, source, decode):
        """`decode(padded ids)` over batches of sentences of similar length, in order,
        each in one of the few fixed shapes of `decoding_shape`."""
        source = truncate(source, self.max_source_length)
        outputs = [None] * len(source)
        order = np.argsort([len(row) for row in source], kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            batch = [non_empty(source[i]) for i in rows]
            size, length = self.decoding_shape(len(batch), max(map(len, batch)))
            batch += [batch[0][:1]] * (size - len(batch))  # top-up rows, decoded and dropped
            for row, output in zip(rows, decode(pad_rows(batch, length)), strict=False):
                outputs[row] = output
        return outputs

    def decoding_shape(self, rows, longest):
        """`(batch, source length)` for `rows` sentences of up to `longest` tokens."""
        if keras.backend.backend() != "jax":
            return rows, longest
        length = min(SHORT_SOURCE, self.max_source_length) if longest <= SHORT_SOURCE \
            else self.max_source_length
        return (SMALL_BATCH if rows <= SMALL_BATCH else self.batch_size), length

    def generate(self, source_ids, beam_width=None):
        """Output token ids for a padded `(batch, length)` id array (compiled per beam width)."""
        beam_width = beam_width or self.beam_width
        if beam_width not in self._generate:
            self._generate[beam_width] = compiled(
                lambda source: self.decoder.generate(source, self.max_output_length, beam_width),
                self.model, tf_signature=[((None, None), "int32")],  # one graph, any shape
                name=f"decode_beam{beam_width}")
        return keras.ops.convert_to_numpy(self._generate[beam_width](source_ids))

    def generate_all_beams(self, source_ids, beam_width):
        """(token ids `(batch, beam_width, length)`, log-likelihoods), numpy, compiled."""
        key = ("all", beam_width)
        if key not in self._generate:
            self._generate[key] = compiled(
                lambda source: self.decoder.generate_all_beams(source, self.max_output_length,
                                                               beam_width),
                self.model, tf_signature=[((None, None), "int32")],
                name=f"decode_all_beams{beam_width}")
        tokens, log_probs = self._generate[key](source_ids)
        return keras.ops.convert_to_numpy(tokens), keras.ops.convert_to_numpy(log_probs)

    def cross_attention(self, sentence):
        """(source tokens, output tokens, weights `(output, source)`) for one sentence.

        The weights are the model's cross-attention (the last Transformer decoder
        block's, averaged over heads; the GRU's additive attention) while it re-reads
        its own greedy translation.
        """
        tokenizer = self.tokenizer
        source = np.asarray(tokenizer.source_ids([sentence])[0][:self.max_source_length])[None]
        size, length = self.decoding_shape(1, source.shape[1])
        output = self.generate(pad_rows(np.repeat(source, size, axis=0), length),
                               beam_width=1)[0]
        length = int(np.argmax(output == tokenizer.end_id)) or len(output) - 1
        weights = self.model.attention_weights(source, output[None, :length])
        return ([tokenizer.source_vocabulary[i] for i in source[0]],
                [tokenizer.target_vocabulary[i] for i in output[1:length + 1]],
                keras.ops.convert_to_numpy(keras.ops.cast(weights, "float32")))

    def save(self, folder):
        settings = {"tokenization": self.tokenizer.kind, "direction": self.tokenizer.direction,
                    "sequence_length": self.tokenizer.sequence_length,
                    "max_source_length": self.max_source_length,
                    "max_output_length": self.max_output_length, "beam_width": self.beam_width}
        return save_folder(folder, self.model, KIND, settings, {
            "source_vocabulary": self.tokenizer.source_vocabulary,
            "target_vocabulary": self.tokenizer.target_vocabulary})

    @classmethod
    def load(cls, folder, beam_width=None, batch_size=None):
        """A saved translator (another version's folder: one line saying to train again),
        decoding `batch_size` sentences at once (default 128)."""
        model, settings, vocabularies = read_folder(folder, [KIND])
        tokenizer = Tokenizer(settings["tokenization"], vocabularies["source_vocabulary"],
                              vocabularies["target_vocabulary"], settings["sequence_length"],
                              settings["direction"])
        return cls(model, tokenizer, settings["max_source_length"],
                   settings["max_output_length"], beam_width or settings["beam_width"],
                   batch_size or 128)


# ## Batched greedy and beam decoding of a translator, with cached state

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
