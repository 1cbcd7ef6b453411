"""A stack of blocks of one kind, each with its own weights, run by one `ops.scan`."""

import keras
from keras import ops

SEED_STATE = "seed_generator_state"  # the name Keras gives a SeedGenerator's variable
SEEDS_PER_BLOCK = 1024  # room for a block's dropout layers in the seeds drawn per call


@keras.saving.register_keras_serializable(package="nlpkit")
class ScannedBlocks(keras.layers.Layer):
    """`depth` blocks like `block`, each with its own weights, applied in turn by one
    `keras.ops.scan` (as MaxText's `scan_layers` and flax's `nn.scan`).

    Unrolled, a stack of N blocks puts N copies of the block in a compiled program,
    and XLA compiles every copy, forward and backward; scanned, the program holds the
    block once and loops over its weights, stacked along a new first axis, so a deep
    stack compiles in about the time of one block. The outputs are those of the blocks
    applied one after another.

    `block` is a template: every trainable variable it has becomes one variable of
    shape `(depth, *shape)` here, initialized from `depth` fresh blocks of its config.
    Its dropout layers draw their masks from this layer's seed generator, a different
    seed for every block and every call. A block with other non-trainable state (batch
    statistics, say) is refused.

    Called as the block is: `stack(x, *args, **kwargs)` is
    `block_n(... block_1(x, *args, **kwargs) ..., *args, **kwargs)`. Masks are not
    filled in by Keras: pass them as the block names them (`mask=...`). The block must
    return one tensor shaped like `x`. For anything else a block offers (a decoder's
    caches, say), `views()` gives `depth` stand-ins for the blocks, each calling the
    template with its own weights, for a Python loop as over a list of blocks.

    Args:
        block: an unbuilt Keras layer, the block to repeat (kept by its config).
        depth: int. The number of blocks.
        seed: int or None. The seed of the dropout masks.

    Example:
    >>> from layers import TransformerEncoder
    >>> stack = ScannedBlocks(TransformerEncoder(16, 32, 4), depth=3)
    >>> stack.build((2, 5, 16))
    >>> tuple(stack(keras.ops.ones((2, 5, 16))).shape), tuple(stack.weights[0].shape)
    ((2, 5, 16), (3, 16, 4, 4))
    """

    def __init__(self, block, depth, seed=None, **kwargs):
        if not isinstance(block, keras.layers.Layer):
            raise ValueError(f"`block` must be a Keras layer, got {block!r}.")
        if block.built:
            raise ValueError("`block` must be unbuilt: ScannedBlocks makes its weights.")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"`depth` must be a positive int, got {depth!r}.")
        kwargs.setdefault("dtype", block.dtype_policy)
        # the template's float32 weights reach it uncast; it casts them as it computes
        super().__init__(autocast=False, **kwargs)
        self.block_config = keras.saving.serialize_keras_object(block)
        self.depth, self.seed = depth, seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True
        self._template = _Untracked(block)
        self._input_shapes = None

    @property
    def template(self):
        """The block the stack runs; its own weights are never used."""
        return self._template.layer

    def build(self, *input_shapes):
        self._input_shapes = [tuple(shape) for shape in input_shapes]
        blocks = [self.template] + [keras.saving.deserialize_keras_object(self.block_config)
                                    for _ in range(self.depth - 1)]
        for block in blocks:
            block.build(*input_shapes)
        self._check_state(self.template)
        self.stacked = [
            self.add_weight(name=_weight_name(variable, self.template),
                            shape=(self.depth, *variable.shape), dtype=variable.dtype,
                            initializer=_stacked_values([b.trainable_variables[index]
                                                         for b in blocks]))
            for index, variable in enumerate(self.template.trainable_variables)
        ]
        self.built = True

    def get_build_config(self):
        return {"input_shapes": self._input_shapes}

    def build_from_config(self, config):
        self.build(*config["input_shapes"])

    def call(self, inputs, *args, training=None, **kwargs):
        seeds = self.seed_generator.next()

        def apply_block(x, weights_and_index):
            weights, index = weights_and_index
            return self._apply(weights, index, seeds,
                               lambda block: block(x, *args, training=training, **kwargs)), None

        stacked = [variable.value for variable in self.stacked]
        outputs, _ = ops.scan(apply_block, inputs, (stacked, ops.arange(self.depth)))
        return outputs

    def views(self):
        """`depth` callables standing for the blocks, in order: `views()[i](...)` calls
        the template with block i's weights, and so do its methods
        (`views()[i].initial_cache(...)`)."""
        return [_BlockView(self, index) for index in range(self.depth)]

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def _apply(self, weights, index, seeds, function):
        """`function(template)` with block `index`'s weights and seeds."""
        seed_states = self._seed_states()
        offsets = [index * SEEDS_PER_BLOCK + number for number in range(len(seed_states))]
        mapping = list(zip(self.template.trainable_variables, weights)) + [
            (state, ops.add(seeds, ops.cast(ops.stack([offset, 0]), seeds.dtype)))
            for state, offset in zip(seed_states, offsets)]
        with keras.StatelessScope(state_mapping=mapping):
            return function(self.template)

    def _seed_states(self):
        return [variable for variable in self.template.non_trainable_variables
                if variable.path.endswith(SEED_STATE)]

    def _check_state(self, block):
        other = [variable.path for variable in block.non_trainable_variables
                 if not variable.path.endswith(SEED_STATE)]
        if other:
            raise ValueError(f"ScannedBlocks cannot carry the block's non-trainable state "
                             f"{other}: stack blocks whose only state is their weights.")
        if len(self._seed_states()) > SEEDS_PER_BLOCK:
            raise ValueError(f"A block may hold at most {SEEDS_PER_BLOCK} seed generators.")

    def get_config(self):
        config = super().get_config()
        config.update({"block": self.block_config, "depth": self.depth, "seed": self.seed})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        block = keras.saving.deserialize_keras_object(config.pop("block"))
        return cls(block, **config)


class _Untracked:
    """Holds the template out of Keras's sight, so its weights are not the layer's."""

    def __init__(self, layer):
        self.layer = layer


class _BlockView:
    """Block `index` of a `ScannedBlocks`: calls and methods of the template, run with
    that block's weights (unscanned, for a Python loop over the blocks)."""

    def __init__(self, stack, index):
        self.stack, self.index = stack, index

    def _run(self, function):
        weights = [variable.value[self.index] for variable in self.stack.stacked]
        seeds = self.stack.seed_generator.next()
        return self.stack._apply(weights, self.index, seeds, function)

    def __call__(self, *args, **kwargs):
        return self._run(lambda block: block(*args, **kwargs))

    def __getattr__(self, name):
        attribute = getattr(self.stack.template, name)
        if not callable(attribute):
            return attribute

        def method(*args, **kwargs):
            return self._run(lambda block: getattr(block, name)(*args, **kwargs))

        return method


def _weight_name(variable, block):
    """The variable's path inside the block, one word (`self_attention_query_kernel`)."""
    return variable.path.split(block.name + "/", 1)[-1].replace("/", "_")


def _stacked_values(variables):
    def initializer(shape, dtype=None):
        return ops.stack([ops.convert_to_tensor(variable.value) for variable in variables])

    return initializer
