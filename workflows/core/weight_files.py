"""Weight files: the values of a model's variables (then its optimizer's), in order, as
`.npz`, each written atomically under its digest; loaded back, or averaged over several
(checkpoint averaging)."""

import errno
import os
import shutil
import uuid

import keras
import numpy as np

from data_prep.cache import sha256_of


def weight_values(model, optimizer=False):
    """The model's variable values (then its optimizer's) as host arrays; on JAX, read
    during `fit` (from a batch's end) too."""
    sync = getattr(model, "jax_state_sync", None)
    if sync:
        sync()
    variables = [*model.weights, *(model.optimizer.variables
                                   if optimizer and model.optimizer is not None else [])]
    return [_host_value(variable) for variable in variables]


def _host_value(variable):
    value = variable.value
    if hasattr(value, "detach"):  # PyTorch's (a parameter that requires grad)
        value = value.detach()
    if hasattr(value, "numpy"):  # TensorFlow's, a tf.distribute mirrored one included
        return np.asarray(value.cpu().numpy() if hasattr(value, "cpu") else value.numpy())
    return np.asarray(keras.ops.convert_to_numpy(value))


def assign_values(model, values):
    """Gives the model (and its optimizer, if `values` hold them) these values."""
    variables = list(model.weights)
    if len(values) > len(variables) and model.optimizer is not None:
        variables += model.optimizer.variables
    if len(values) != len(variables):
        raise ValueError(f"{len(values)} arrays for {len(variables)} variables")
    for variable, value in zip(variables, values, strict=True):
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"{variable.path} has shape {tuple(variable.shape)}, the file "
                             f"{value.shape}")
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


def load_values(model, path):
    with np.load(path) as saved:
        assign_values(model, [saved[f"arr_{i}"] for i in range(len(saved.files))])


def write_values(path, values):
    """Writes `values` atomically (refused before a byte is written when the disk has
    not room for them); returns the file's SHA-256."""
    values = [value.astype("float32") if value.dtype.kind == "V" or "bfloat16" in str(
        value.dtype) else value for value in values]
    needed = sum(value.nbytes for value in values) * 1.1 + (1 << 20)
    free = shutil.disk_usage(path.parent).free
    if free < needed:
        raise OSError(errno.ENOSPC, f"No space left on device for {needed / 2**20:.0f} MB "
                                    f"of weights ({free / 2**20:.0f} MB free)", str(path))

    def write(tmp):
        with open(tmp, "wb") as file:
            np.savez(file, *values)

    return replace_atomically(path, write)


def average_weights(model, paths):
    """Loads into `model` the mean of the weight files `paths` (checkpoint averaging).

    Floating-point variables are averaged; others (e.g. seed-generator states) keep the
    last file's values.
    """
    sums = None
    for path in paths:
        load_values(model, path)
        values = weight_values(model)
        sums = [value.astype("float64") for value in values] if sums is None else \
            [total + value for total, value in zip(sums, values, strict=True)]
    for variable, total, last in zip(model.weights, sums, values, strict=True):
        if "float" in str(variable.dtype):
            variable.assign((total / len(paths)).astype(last.dtype))


def replace_atomically(path, write):
    """`write(tmp)` to a fresh temporary sibling, then rename it over `path`; returns
    the SHA-256 of what was written.

    Each write has its own temporary name: a save interrupted by Ctrl-C may still hold
    its file open while the interrupt handler writes the checkpoint again.
    """
    tmp = path.with_name(f".partial-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        write(tmp)
        digest = sha256_of(tmp)
        os.replace(tmp, path)
        return digest
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
