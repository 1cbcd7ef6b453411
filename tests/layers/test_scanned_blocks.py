"""ScannedBlocks: the blocks applied in turn, with their own weights, in one scan."""

import keras
import numpy as np
import pytest
from keras import ops

from layers import ScannedBlocks, TransformerDecoder, TransformerEncoder
from tests.layers.helpers import assert_close, to_numpy

DIM = 16


def encoder(**kwargs):
    return TransformerEncoder(DIM, 32, 4, norm_first=True, **kwargs)


def built_stack(block, depth, *shapes):
    stack = ScannedBlocks(block, depth)
    stack.build(*(shapes or [(None, None, DIM)]))
    return stack


def unrolled_copies(stack, make_block, *shapes):
    """`depth` separate blocks holding the stack's weights, block by block."""
    blocks = []
    for index in range(stack.depth):
        block = make_block()
        block.build(*(shapes or [(None, None, DIM)]))
        for variable, stacked in zip(block.trainable_variables, stack.stacked, strict=True):
            variable.assign(to_numpy(stacked)[index])
        blocks.append(block)
    return blocks


def inputs(batch=2, length=5, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, length, DIM)).astype("float32")


MASK = np.array([[True, True, True, False, False], [True] * 5])


def test_weights_are_stacked_one_variable_per_block_variable():
    stack = built_stack(encoder(), 3)
    template = stack.template.trainable_variables
    assert len(stack.trainable_variables) == len(template)
    for stacked, variable in zip(stack.stacked, template, strict=True):
        assert tuple(stacked.shape) == (3, *variable.shape)
    kernels = to_numpy(stack.stacked[0])
    assert not np.allclose(kernels[0], kernels[1])  # each block initialized apart
    assert stack.non_trainable_variables == [stack.seed_generator.state]


@pytest.mark.parametrize("norm_first", [False, True])
def test_outputs_equal_the_blocks_applied_in_turn_with_a_mask(norm_first):
    stack = built_stack(TransformerEncoder(DIM, 32, 4, norm_first=norm_first), 3)
    blocks = unrolled_copies(stack, lambda: TransformerEncoder(DIM, 32, 4,
                                                               norm_first=norm_first))
    x = expected = inputs()
    for block in blocks:
        expected = block(expected, mask=MASK)
    actual = stack(x, mask=MASK)
    assert tuple(actual.shape) == x.shape
    assert_close(actual, expected, atol=2e-5)


def test_padding_does_not_reach_the_real_positions():
    stack = built_stack(encoder(), 2)
    x = inputs()
    changed = x.copy()
    changed[0, 3:] += 100.0  # padded positions of the first row
    a, b = to_numpy(stack(x, mask=MASK)), to_numpy(stack(changed, mask=MASK))
    np.testing.assert_allclose(a[0, :3], b[0, :3], atol=1e-5)


def test_a_decoder_stack_takes_the_encoder_output_and_both_masks():
    shapes = [(None, None, DIM), (None, None, DIM)]
    stack = built_stack(TransformerDecoder(DIM, 32, 4), 2, *shapes)
    blocks = unrolled_copies(stack, lambda: TransformerDecoder(DIM, 32, 4), *shapes)
    target, source = inputs(length=4, seed=1), inputs(seed=2)
    target_mask = np.array([[True, True, False, False], [True] * 4])
    masks = {"decoder_sequence_mask": target_mask, "encoder_sequence_mask": MASK}
    expected = target
    for block in blocks:
        expected = block(expected, source, **masks)
    assert_close(stack(target, source, **masks), expected, atol=2e-5)


def test_views_call_each_block_and_its_methods_with_its_own_weights():
    shapes = [(None, None, DIM), (None, None, DIM)]
    stack = built_stack(TransformerDecoder(DIM, 32, 4), 2, *shapes)
    blocks = unrolled_copies(stack, lambda: TransformerDecoder(DIM, 32, 4), *shapes)
    source = inputs(seed=3)
    views = stack.views()
    assert len(views) == 2 and views[1].num_heads == 4
    for view, block in zip(views, blocks, strict=True):
        assert_close(view.cross_attention_cache(source), block.cross_attention_cache(source))
        assert_close(view(inputs(length=4), source), block(inputs(length=4), source), atol=2e-5)


def test_dropout_is_drawn_anew_for_each_block_and_call_and_off_in_inference():
    stack = built_stack(encoder(dropout=0.5), 2)
    x = inputs()
    first, second = stack(x, training=True), stack(x, training=True)
    assert not np.allclose(to_numpy(first), to_numpy(second))
    assert_close(stack(x), stack(x))


@pytest.mark.skipif(keras.backend.backend() == "torch", reason=(
    "Keras's torch dropout draws from torch's global generator when the block's Dropout "
    "has no seed of its own: the masks still differ per block and call, but the stack's "
    "seed does not reproduce them"))
def test_the_same_seed_draws_the_same_dropout_masks():
    x = inputs()
    again = ScannedBlocks(encoder(dropout=0.5), 2, seed=7)
    again.build((None, None, DIM))
    same_seed = ScannedBlocks(encoder(dropout=0.5), 2, seed=7)
    same_seed.build((None, None, DIM))
    same_seed.set_weights(again.get_weights())
    assert_close(again(x, training=True), same_seed(x, training=True))


def stack_model(dropout=0.0):
    source = keras.Input((None, DIM))
    return keras.Model(source, built_stack(encoder(dropout=dropout), 2)(source))


def test_a_model_with_it_round_trips_through_a_keras_file(tmp_path):
    model = stack_model()
    model.save(tmp_path / "stack.keras")
    restored = keras.saving.load_model(tmp_path / "stack.keras")
    x = inputs()
    assert_close(restored(x), model(x))
    stack = restored.layers[-1]
    assert isinstance(stack, ScannedBlocks) and stack.depth == 2
    assert stack.get_config()["block"]["class_name"] == "TransformerEncoder"


@pytest.mark.integration  # TensorFlow traces the scan's gradient for seconds
def test_it_trains_in_a_compiled_model():
    keras.utils.set_random_seed(0)
    model = stack_model(dropout=0.1)
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    x = inputs(batch=8)
    history = model.fit(x, x * 0.5, epochs=5, verbose=0).history["loss"]
    assert history[-1] < history[0]


def test_config_round_trips():
    stack = ScannedBlocks(encoder(dropout=0.1), 4, seed=3, name="stack")
    copy = ScannedBlocks.from_config(stack.get_config())
    assert copy.get_config() == stack.get_config()
    assert copy.depth == 4 and copy.template.dropout == 0.1


def test_mixed_precision_computes_in_the_blocks_policy_with_float32_weights():
    stack = ScannedBlocks(encoder(dtype="mixed_bfloat16"), 2)
    stack.build((None, None, DIM))
    assert all(variable.dtype == "float32" for variable in stack.stacked)
    outputs = stack(ops.cast(inputs(), "bfloat16"), mask=MASK)
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"


@pytest.mark.parametrize("arguments, message", [
    ({"block": "encoder", "depth": 2}, "must be a Keras layer"),
    ({"depth": 0}, "positive int"),
])
def test_bad_arguments_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        ScannedBlocks(**{"block": encoder(), **arguments})


def test_a_built_block_or_one_with_other_state_is_refused():
    built = encoder()
    built.build((None, None, DIM))
    with pytest.raises(ValueError, match="unbuilt"):
        ScannedBlocks(built, 2)
    batch_normalized = ScannedBlocks(keras.layers.BatchNormalization(), 2)
    with pytest.raises(ValueError, match="non-trainable state"):
        batch_normalized.build((None, DIM))
