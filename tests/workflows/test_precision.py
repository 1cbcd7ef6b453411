"""`dtype_policy="auto"`: the precision each device gets, and what Keras does with it."""

import keras
import pytest

from workflows.core import precision
from workflows.seq2seq.presets import make_config
from workflows.translation import build_model


@pytest.mark.parametrize("device, policy, loss_scaling", [
    (("gpu", "9.0"), "mixed_bfloat16", False),  # H100: bfloat16, no loss scaling
    (("gpu", "7.0"), "mixed_float16", True),  # V100: float16 with loss scaling
    (("cpu", None), "float32", False)])
def test_auto_picks_the_precision_of_the_device(monkeypatch, device, policy, loss_scaling):
    monkeypatch.setattr(precision, "first_device", lambda: device)
    monkeypatch.setattr(precision, "cpu_computes_bfloat16", lambda: False)
    config = make_config("transformer", "gpu", {"embed_dim": 8, "dense_dim": 8,
                                                "num_heads": 2, "encoder_layers": 1,
                                                "decoder_layers": 1})
    assert config.dtype_policy == "auto"
    model = build_model(config, 20, 20)
    assert keras.config.dtype_policy().name == policy
    assert model.compute_dtype == policy.removeprefix("mixed_")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) == loss_scaling


def test_auto_on_this_machine_is_what_its_first_device_calls_for():
    assert precision.resolve_precision("auto") == precision.policy_for(*precision.first_device())
    assert precision.resolve_precision("mixed_bfloat16") == "mixed_bfloat16"


def test_a_cpu_computes_in_bfloat16_only_with_the_instructions_for_it(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert not precision.cpu_computes_bfloat16(cpuinfo)  # AVX2 only: float32
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert precision.cpu_computes_bfloat16(cpuinfo)
    assert not precision.cpu_computes_bfloat16(tmp_path / "missing")  # not Linux: float32
    monkeypatch.setattr(precision, "cpu_computes_bfloat16", lambda: True)
    assert precision.policy_for("cpu") == "mixed_bfloat16"
    assert make_config("transformer", "cpu").dtype_policy == "auto"
