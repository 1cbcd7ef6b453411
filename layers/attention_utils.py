"""Mask and residual helpers shared by the Transformer layers (keras.ops only)."""

from keras import ops


def padding_attention_mask(padding_mask):
    """Turns a `(batch, keys)` padding mask into a `(batch, 1, keys)` attention mask.

    The middle axis broadcasts over queries: every query may attend to every real key.
    Returns `None` when there is no padding mask.
    """
    if padding_mask is None:
        return None
    return ops.expand_dims(ops.cast(padding_mask, "bool"), axis=1)


def causal_attention_mask(query_length, key_length, query_offset=0):
    """A `(1, query_length, key_length)` mask where query `i` sees keys `<= offset + i`.

    `query_offset` is the position of the first query: 0 for a full sequence, the
    cache index for a step of incremental decoding.
    """
    query_positions = ops.arange(query_length) + query_offset
    key_positions = ops.arange(key_length)
    mask = ops.expand_dims(query_positions, 1) >= ops.expand_dims(key_positions, 0)
    return ops.expand_dims(mask, 0)


def without_keras_mask(x):
    """`x` without the Keras mask attached to it (or `None` for `None`).

    The Transformer blocks turn padding masks into attention masks themselves; their
    sublayers must not receive (and warn about dropping) the mask attached to `x`.
    """
    return None if x is None else ops.copy(x)


def merge_masks(*masks):
    """Logical AND of the masks that are not `None` (broadcasting); `None` if all are."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def residual_block(inputs, transform, norm, dropout, norm_first, training=None):
    """One Transformer sublayer with its residual connection and layer norm.

    Post-LN (Vaswani et al.): `norm(x + dropout(f(x)))`.
    Pre-LN (Xiong et al., 2020): `x + dropout(f(norm(x)))`.
    `transform` returns the sublayer output, or a tuple whose first item it is; the
    rest of the tuple (a cache, attention scores) is returned alongside.
    """
    outputs = transform(norm(inputs) if norm_first else inputs)
    extras = ()
    if isinstance(outputs, tuple):
        outputs, extras = outputs[0], outputs[1:]
    outputs = inputs + dropout(outputs, training=training)
    if not norm_first:
        outputs = norm(outputs)
    return (outputs, *extras) if extras else outputs
