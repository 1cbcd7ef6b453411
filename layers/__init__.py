"""Reusable Keras 3 layers for NLP, backend-agnostic (`keras.ops` only).

Importing this package registers every layer, schedule and loss with Keras, so models
that use them load with `keras.saving.load_model` without `custom_objects`.
"""

from layers.bahdanau_attention import BahdanauAttention
from layers.gru_seq2seq_decoder import GRUSeq2SeqDecoder
from layers.gru_seq2seq_encoder import GRUSeq2SeqEncoder
from layers.layerwise_adam import LayerwiseAdam
from layers.masked_crossentropy import MaskedCrossentropy
from layers.naive_bayes_linear import NaiveBayesLinear
from layers.positional_embedding import PositionalEmbedding
from layers.rnn_classifier import RNNClassifier
from layers.scanned_blocks import ScannedBlocks
from layers.schedules import NoamSchedule, WarmupCosineToHorizon, WarmupLinearDecay
from layers.sine_position_encoding import SinePositionEncoding
from layers.transformer_decoder import TransformerDecoder
from layers.transformer_encoder import TransformerEncoder

__all__ = [
    "BahdanauAttention",
    "GRUSeq2SeqDecoder",
    "GRUSeq2SeqEncoder",
    "LayerwiseAdam",
    "MaskedCrossentropy",
    "NaiveBayesLinear",
    "NoamSchedule",
    "PositionalEmbedding",
    "RNNClassifier",
    "ScannedBlocks",
    "SinePositionEncoding",
    "TransformerDecoder",
    "TransformerEncoder",
    "WarmupCosineToHorizon",
    "WarmupLinearDecay",
]
