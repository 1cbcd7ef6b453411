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
        pytest.skip(f"{backend} is not installed (jax: pip install -r requirements-dev.txt; "
                    "torch: see the README, On a GPU)")
    files = sorted(str(path.relative_to(ROOT))
                   for path in (ROOT / "tests" / "layers").glob("test_*.py"))
    halves = [["--doctest-modules", "layers", *files[0::2]], files[1::2]]  # two processes at once
    environment = {**os.environ, "KERAS_BACKEND": backend}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-n", "0"]  # each half in one process, not in two workers of its own
    runs = [subprocess.Popen([*command, *half], cwd=ROOT, env=environment,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for half in halves]
    for run in runs:
        output = run.communicate()[0]
        assert run.returncode == 0, output[-6000:]
