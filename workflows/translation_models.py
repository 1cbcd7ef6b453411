"""Translation models from `layers/`, their loss, and batched cached decoding.

Backend-agnostic (`keras.ops` only): the training graphs are functional Keras
models (`{"source": ids, "target": ids} -> next-token logits`) that save and load as
`.keras` files; `Decoder` reuses their layers for incremental decoding with cached
state, driven by keras-hub's greedy and beam samplers.
"""

import keras
import keras_hub
from keras import ops

from layers import (
    GRUSeq2SeqDecoder,
    GRUSeq2SeqEncoder,
    PositionalEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)

PAD_ID = 0
NEG_INF = -1e9


def transformer_translator(config, source_vocab_size, target_vocab_size):
    """Encoder-decoder Transformer: N encoder and decoder blocks, post- or pre-LN.

    The tutorial's model is `encoder_layers=decoder_layers=1`, `key_dim=embed_dim`,
    learned positions, and `Dropout(0.5)` before the output layer.
    """
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")

    def embedding(name, vocab_size):
        return PositionalEmbedding(
            config.max_positions, vocab_size, config.embed_dim, position=config.position,
            scale_token_embeddings=config.scale_embeddings, name=name)

    def block_kwargs():
        return {"embed_dim": config.embed_dim, "dense_dim": config.dense_dim,
                "num_heads": config.num_heads, "key_dim": config.key_dim,
                "dropout": config.dropout, "norm_first": config.norm_first}

    x = embedding("source_embedding", source_vocab_size)(source)
    x = keras.layers.Dropout(config.dropout, name="source_dropout")(x)
    for index in range(config.encoder_layers):
        x = TransformerEncoder(**block_kwargs(), name=f"encoder_{index}")(x)
    if config.norm_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_norm")(x)
    target_embedding = embedding("target_embedding", target_vocab_size)
    y = keras.layers.Dropout(config.dropout, name="target_dropout")(target_embedding(target))
    for index in range(config.decoder_layers):
        y = TransformerDecoder(**block_kwargs(), name=f"decoder_{index}")(y, x)
    if config.norm_first:
        y = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_norm")(y)
    y = keras.layers.Dropout(config.output_dropout, name="output_dropout")(y)
    if config.tie_embeddings:
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(
            target_embedding(y, reverse=True))
    else:
        logits = keras.layers.Dense(target_vocab_size, dtype="float32", name="logits")(y)
    return keras.Model({"source": source, "target": target}, logits, name="transformer")


def gru_translator(config, source_vocab_size, target_vocab_size):
    """The tutorial's RNN translator: bidirectional GRU encoder, GRU decoder (+ attention)."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    sequence, state = GRUSeq2SeqEncoder(source_vocab_size, config.embed_dim, config.latent_dim,
                                        name="encoder")(source)
    logits = GRUSeq2SeqDecoder(
        target_vocab_size, config.embed_dim, config.latent_dim, attention=config.attention,
        dropout=config.output_dropout, name="decoder",
    )(target, state, sequence)
    return keras.Model({"source": source, "target": target}, logits, name="gru_seq2seq")


@keras.saving.register_keras_serializable(package="nlpkit")
class MaskedCrossentropy(keras.losses.Loss):
    """Token cross-entropy from logits, averaged over real (non-padding) labels only.

    With `label_smoothing=e` the target is `(1 - e)` on the right token and `e`
    spread uniformly over the vocabulary (Szegedy et al., 2016).
    """

    def __init__(self, label_smoothing=0.0, name="masked_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def __call__(self, y_true, y_pred, sample_weight=None):
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        labels = ops.cast(y_true, "int32")
        nll = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), -1)
        per_token = (1.0 - self.label_smoothing) * nll \
            - self.label_smoothing * ops.mean(log_probs, axis=-1)
        mask = ops.cast(ops.not_equal(labels, PAD_ID), "float32")
        return ops.sum(per_token * mask) / ops.maximum(ops.sum(mask), 1.0)

    def call(self, y_true, y_pred):  # pragma: no cover - __call__ does the work
        return self(y_true, y_pred)

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing}


def is_transformer(model):
    return any(layer.name == "source_embedding" for layer in model.layers)


class Decoder:
    """Batched greedy or beam decoding of a trained translator, with cached state.

    Each step feeds only the newest token: the Transformer's decoder blocks keep
    their keys/values in a fixed-size cache (`TransformerDecoder` cached decoding)
    and the encoder outputs are projected once; the GRU keeps its state. Beams that
    have finished (`end_id`, or padding after it) only extend with padding at no
    cost, so finished hypotheses keep their score.
    """

    def __init__(self, model, start_id, end_id):
        self.model, self.start_id, self.end_id = model, start_id, end_id
        self.transformer = is_transformer(model)

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
        tokens = sampler(self.next, prompt, cache=self.initial_cache(source, max_length),
                         index=1, mask=mask, stop_token_ids=[self.end_id])
        return self._pad_after_end(tokens)

    def initial_cache(self, source, max_length):
        source_mask = ops.not_equal(source, PAD_ID)
        if self.transformer:
            encoded = self._encode(source, source_mask)
            decoders = self._decoders()
            batch = ops.shape(source)[0]
            return (tuple(d.initial_cache(batch, max_length) for d in decoders),
                    tuple(d.cross_attention_cache(encoded) for d in decoders), source_mask)
        sequence, state = self.model.get_layer("encoder")(source)
        return state, sequence, source_mask

    def next(self, prompt, cache, index):
        """keras-hub sampler callback: logits for position `index` from token `index - 1`."""
        previous = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
        if self.transformer:
            logits, cache = self._transformer_step(previous, cache, index - 1)
        else:
            logits, cache = self._gru_step(previous, cache)
        vocabulary = ops.arange(ops.shape(logits)[-1])
        never = ops.logical_or(vocabulary == PAD_ID, vocabulary == self.start_id)
        logits = ops.where(never[None, :], NEG_INF, logits)
        finished = ops.logical_or(ops.equal(previous, self.end_id), ops.equal(previous, PAD_ID))
        only_padding = ops.where(vocabulary == PAD_ID, 0.0, NEG_INF)
        return ops.where(finished, only_padding[None, :], logits), None, cache

    def _encode(self, source, source_mask):
        x = self.model.get_layer("source_embedding")(source)
        for layer in self._layers("encoder_"):
            x = layer(x, mask=source_mask)
        if self._has("encoder_norm"):
            x = self.model.get_layer("encoder_norm")(x)
        return x

    def _transformer_step(self, token, cache, position):
        self_caches, cross_caches, source_mask = cache
        x = self.model.get_layer("target_embedding")(token, start_index=position)
        updated = []
        for decoder, self_cache, cross_cache in zip(self._decoders(), self_caches, cross_caches,
                                                    strict=True):
            x, self_cache = decoder(
                x, encoder_sequence_mask=source_mask, self_attention_cache=self_cache,
                cache_update_index=position, cross_attention_cache=cross_cache)
            updated.append(self_cache)
        if self._has("decoder_norm"):
            x = self.model.get_layer("decoder_norm")(x)
        logits = self._output_logits(x)
        return logits[:, 0, :], (tuple(updated), cross_caches, source_mask)

    def _output_logits(self, x):
        if isinstance(self.model.get_layer("logits"), keras.layers.Dense):
            return ops.cast(self.model.get_layer("logits")(x), "float32")
        return ops.cast(self.model.get_layer("target_embedding")(x, reverse=True), "float32")

    def _gru_step(self, token, cache):
        state, sequence, source_mask = cache
        logits, state = self.model.get_layer("decoder")(
            token, state, sequence, encoder_sequence_mask=source_mask, return_state=True)
        return logits[:, 0, :], (state, sequence, source_mask)

    def _decoders(self):
        return self._layers("decoder_")

    def _layers(self, prefix):
        return [layer for layer in self.model.layers
                if layer.name.startswith(prefix) and layer.name[len(prefix):].isdigit()]

    def _has(self, name):
        return any(layer.name == name for layer in self.model.layers)

    def _pad_after_end(self, tokens):
        ended = ops.cumsum(ops.cast(ops.equal(tokens, self.end_id), "int32"), axis=1)
        after_end = ops.concatenate(
            [ops.zeros_like(ended[:, :1]), ended[:, :-1]], axis=1) > 0
        return ops.where(after_end, PAD_ID, tokens)


def uncached_greedy(model, source, start_id, end_id, max_length):
    """The tutorial's decoding loop: re-runs the whole model for every new token.

    Kept as the baseline of the decoding benchmark and to test `Decoder` against.
    """
    import numpy as np

    source = np.asarray(source, "int32")
    tokens = np.zeros((len(source), max_length), "int32")
    tokens[:, 0] = start_id
    for index in range(1, max_length):
        logits = model({"source": source, "target": tokens[:, :index]}, training=False)
        logits = ops.convert_to_numpy(logits)[:, -1, :]
        logits[:, [PAD_ID, start_id]] = NEG_INF  # as `Decoder`: never padding or [start]
        tokens[:, index] = np.argmax(logits, axis=-1)
        done = (tokens[:, :index + 1] == end_id).any(axis=1)
        if done.all():
            break
    return ops.convert_to_numpy(Decoder(model, start_id, end_id)._pad_after_end(tokens))


def cross_attention(translator, sentence):
    """(source tokens, output tokens, weights `(output, source)`) for one sentence.

    The weights are the last Transformer decoder block's cross-attention, averaged
    over heads, while it re-reads its own greedy translation (the GRU with
    attention: its additive attention weights).
    """
    import numpy as np

    tokenizer = translator.tokenizer
    source = np.asarray(tokenizer.source_ids([sentence])[0][:translator.max_source_length])[None]
    output = translator.generate(source, beam_width=1)[0]
    length = int(np.argmax(output == tokenizer.end_id)) or len(output) - 1
    target = output[None, :length]
    model = translator.model
    if is_transformer(model):
        decoding = Decoder(model, tokenizer.start_id, tokenizer.end_id)
        source_mask = ops.not_equal(source, PAD_ID)
        encoded = decoding._encode(source, source_mask)
        y = model.get_layer("target_embedding")(target)
        for decoder in decoding._decoders():
            y, scores = decoder(y, encoded, encoder_sequence_mask=source_mask,
                                return_attention_scores=True)
        weights = ops.mean(scores[0], axis=0)
    else:
        decoder = model.get_layer("decoder")
        if not decoder.attention:
            weights = ops.zeros((length, source.shape[1]))
        else:
            sequence, state = model.get_layer("encoder")(source)
            hidden, _ = decoder.gru(decoder.embedding(target), initial_state=state)
            _, weights = decoder.attention_layer(hidden, sequence, return_attention_scores=True)
            weights = weights[0]
    source_tokens = [tokenizer.source_vocabulary[i] for i in source[0]]
    output_tokens = [tokenizer.target_vocabulary[i] for i in output[1:length + 1]]
    return source_tokens, output_tokens, ops.convert_to_numpy(ops.cast(weights, "float32"))
