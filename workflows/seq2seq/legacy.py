"""Translators saved before the seq2seq package, as today's model classes.

Until November 2026 a translator's `model.keras` held a plain functional model whose
layers were found by name (`source_embedding`, `encoder_0`, ..., `logits`). This module
reads such a model once, at load time: it rebuilds the same architecture as a
`TransformerTranslator` or `GRUTranslator` from the saved layer configs and copies the
weights layer by layer. Nothing else looks layers up by name.
"""

import keras

from workflows.seq2seq.models import GRUTranslator, TransformerTranslator


def from_functional(model):
    """The `TransformerTranslator` or `GRUTranslator` with `model`'s architecture and weights."""
    names = [layer.name for layer in model.layers]
    if "source_embedding" in names:
        return _transformer(model, names)
    if "encoder" in names and "decoder" in names:
        return _gru(model)
    raise ValueError(f"{model.name} is not a translator this kit saved (layers: {names}).")


def _transformer(model, names):
    source, target = model.get_layer("source_embedding"), model.get_layer("target_embedding")
    block = model.get_layer("encoder_0").get_config()
    converted = TransformerTranslator(
        source.vocab_size, target.vocab_size, source.sequence_length, source.embed_dim,
        block["dense_dim"], block["num_heads"], block["key_dim"],
        encoder_layers=sum(_numbered(name, "encoder_") for name in names),
        decoder_layers=sum(_numbered(name, "decoder_") for name in names),
        dropout=block["dropout"], output_dropout=model.get_layer("output_dropout").rate,
        norm_first=block["norm_first"], position=source.position,
        tie_embeddings=not isinstance(model.get_layer("logits"), keras.layers.Dense),
        scale_embeddings=source.scale_token_embeddings, dtype=source.dtype_policy,
        name=model.name)
    pairs = [(converted.source_embedding, "source_embedding"),
             (converted.target_embedding, "target_embedding"),
             *[(layer, f"encoder_{i}") for i, layer in enumerate(converted.encoder_blocks)],
             *[(layer, f"decoder_{i}") for i, layer in enumerate(converted.decoder_blocks)],
             (converted.encoder_norm, "encoder_norm"), (converted.decoder_norm, "decoder_norm"),
             (converted.output_projection, "logits")]
    return _copy_weights(model, pairs, converted)


def _gru(model):
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    converted = GRUTranslator(encoder.vocab_size, decoder.vocab_size, decoder.embed_dim,
                              decoder.latent_dim, decoder.attention, decoder.dropout,
                              dtype=decoder.dtype_policy, name=model.name)
    return _copy_weights(model, [(converted.encoder, "encoder"), (converted.decoder, "decoder")],
                         converted)


def _numbered(name, prefix):
    return name.startswith(prefix) and name[len(prefix):].isdigit()


def _copy_weights(model, pairs, converted):
    for layer, name in pairs:
        if layer is not None:
            layer.set_weights(model.get_layer(name).get_weights())
    return converted
