"""Runs the layer tests again on the other installed Keras backends (JAX, PyTorch)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

ROOT = Path(__file__).resolve().parents[2]
OTHER_BACKENDS = {"jax": "jax", "torch": "torch"}


@pytest.mark.slow
@pytest.mark.parametrize("backend", sorted(OTHER_BACKENDS))
def test_layer_suite_on_backend(backend):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("run from the TensorFlow suite only")
    if importlib.util.find_spec(OTHER_BACKENDS[backend]) is None:
        pytest.skip(f"{backend} is not installed (jax: pip install -r requirements.txt; "
                    "torch: see the README, Quick start)")
    # one process (the suite's own workers keep both cores busy): one import of the backend
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-n", "0", "--doctest-modules", "layers", "tests/layers"],
                         cwd=ROOT, env={**os.environ, "KERAS_BACKEND": backend},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 0, run.stdout[-6000:]
