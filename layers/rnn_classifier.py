"""Recurrent sequence classifier block: the tutorial's BiLSTM head, generalized."""

import keras
from keras import ops

from layers.validation import require_positive_ints

RNN_CELLS = {"rnn": keras.layers.SimpleRNN, "lstm": keras.layers.LSTM, "gru": keras.layers.GRU}


@keras.saving.register_keras_serializable(package="nlpkit")
class RNNClassifier(keras.layers.Layer):
    """Stacked (bi)directional RNN -> dropout -> dense output, over embedded tokens.

    The tutorial's sentiment model is `Embedding -> Bidirectional(LSTM(32)) ->
    Dropout(0.5) -> Dense(1, sigmoid)`; this block is everything after the
    embedding, for any of `SimpleRNN`, `LSTM` or `GRU`. A recurrent layer updates a
    state `h_t = f(x_t, h_{t-1})` token by token; the last state summarizes the
    sequence (bidirectional: forward and backward last states, concatenated).
    Stacked layers pass their full state sequences up; dropout is applied between
    layers and before the output layer.

    Masking: padded timesteps (from `Embedding(mask_zero=True)` or
    `PositionalEmbedding`) are skipped, so padding does not change the result. The
    output is one vector per sequence, with no mask.

    Args:
        cell: `"lstm"` (default), `"gru"` or `"rnn"` (SimpleRNN).
        units: int. State size of each direction. Defaults to `32`.
        bidirectional: bool. Defaults to `True`.
        num_layers: int. Number of stacked recurrent layers. Defaults to `1`.
        dropout: float. Dropout rate between layers and before the output.
            Defaults to `0.5`.
        recurrent_dropout: float. Dropout on the recurrent state (slow: disables
            the fused cuDNN kernels). Defaults to `0.0`.
        num_classes: int. `1` (default) gives a sigmoid probability per sequence,
            more gives softmax probabilities.

    Example:
    >>> ids = keras.Input(shape=(None,), dtype="int32")
    >>> x = keras.layers.Embedding(1000, 16, mask_zero=True)(ids)
    >>> probability = RNNClassifier(cell="gru", units=8)(x)
    >>> tuple(probability.shape)
    (None, 1)

    References:
        - [Hochreiter and Schmidhuber, 1997](https://doi.org/10.1162/neco.1997.9.8.1735)
        - [Cho et al., 2014](https://arxiv.org/abs/1406.1078)
    """

    def __init__(
        self,
        cell="lstm",
        units=32,
        bidirectional=True,
        num_layers=1,
        dropout=0.5,
        recurrent_dropout=0.0,
        num_classes=1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if cell not in RNN_CELLS:
            raise ValueError(f"`cell` must be one of {sorted(RNN_CELLS)}, got {cell!r}.")
        require_positive_ints(units=units, num_layers=num_layers, num_classes=num_classes)
        self.cell = cell
        self.units = units
        self.bidirectional = bidirectional
        self.num_layers = num_layers
        self.dropout = dropout
        self.recurrent_dropout = recurrent_dropout
        self.num_classes = num_classes
        self.supports_masking = True

    def build(self, input_shape):
        self.recurrent_layers = []
        shape = input_shape
        for index in range(self.num_layers):
            layer = self._recurrent_layer(index)
            if self.bidirectional:
                # The backward layer is made here, not by Bidirectional: Bidirectional
                # copies the forward layer through serialization, which, while a model
                # is being loaded, can hand back the forward layer itself.
                layer = keras.layers.Bidirectional(
                    layer, backward_layer=self._recurrent_layer(index, go_backwards=True),
                    dtype=self.dtype_policy, name=f"bidirectional_{index}")
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
            self.recurrent_layers.append(layer)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        activation = "sigmoid" if self.num_classes == 1 else "softmax"
        self.output_layer = keras.layers.Dense(
            self.num_classes, activation=activation, dtype=self.dtype_policy, name="output"
        )
        self.output_layer.build(shape)
        self.built = True

    def _recurrent_layer(self, index, go_backwards=False):
        return RNN_CELLS[self.cell](
            self.units,
            return_sequences=index < self.num_layers - 1,
            recurrent_dropout=self.recurrent_dropout,
            go_backwards=go_backwards,
            dtype=self.dtype_policy,
            name=f"{'backward_' if go_backwards else ''}{self.cell}_{index}",
        )

    def call(self, inputs, mask=None, training=None):
        x = inputs
        for layer in self.recurrent_layers:
            x = layer(x, mask=mask, training=training)
            x = self.dropout_layer(x, training=training)
        return ops.cast(self.output_layer(x), "float32")

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": self.cell,
                "units": self.units,
                "bidirectional": self.bidirectional,
                "num_layers": self.num_layers,
                "dropout": self.dropout,
                "recurrent_dropout": self.recurrent_dropout,
                "num_classes": self.num_classes,
            }
        )
        return config
