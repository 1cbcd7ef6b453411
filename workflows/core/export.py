"""A run's model out of the kit: ONNX, a TensorFlow SavedModel or LiteRT (Keras's own
`model.export`), with float32 weights or int8 ones (Keras's `model.quantize("int8")`;
for LiteRT its converter's dynamic-range quantization, which takes Keras's float
model), written to the work folder, logged to the run as artifacts and called with
five lines of the format's own runtime, no Keras.

The lesson gives an `Exportable` (its hook `Lesson.exportable(run)`): a Keras model
from arrays to answers, the arrays of an example input, and the files that say how
texts become those arrays (a vocabulary, the classes), written beside the artifact.

    python -m workflows.imdb_sentiment export --format onnx [--quantize int8]
"""

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from process.errors import UserError
from workflows.core.config import ConfigError

# format -> (Keras's name for it, the artifact's file or folder name)
FORMATS = {"onnx": ("onnx", "model.onnx"), "saved_model": ("tf_saved_model", "saved_model"),
           "litert": ("litert", "model.tflite")}
QUANTIZATIONS = ("none", "int8")
RUNTIMES = {"onnx": "tf2onnx onnxruntime", "saved_model": "tensorflow",  # (requirements.txt)
            "litert": "ai-edge-litert"}
# set by `serve_model --export NAME`: the export folder a served pyfunc answers through
SERVED_EXPORT_ENV = "NLPKIT_SERVED_EXPORT"
EXAMPLE_FILE = "example_inputs.npz"  # the example's arrays, by the artifact's input names
USAGE_FILE = "usage.py"  # the five lines that call it, runnable in the export's folder


class ExportFailedError(UserError):
    """A format's converter or runtime is missing, or cannot convert the model."""


@dataclass
class Exportable:
    """What a lesson exports of a run: `model`, a Keras model from arrays (one input or
    a dict of them) to its answers; `example`, the arrays of an example input (as the
    model takes them); `beside`, files to write next to the artifact (name -> a JSON
    value); `copies`, files copied next to it (name -> the path of a file of the run);
    `outputs`, what the answers are, in words; `float_layers`, parts of the names of the
    layers that int8 leaves in float32 (those it costs too much accuracy)."""

    model: object
    example: object
    beside: dict = field(default_factory=dict)
    outputs: str = "the model's outputs"
    copies: dict = field(default_factory=dict)
    float_layers: tuple = ()


def add_export_arguments(parser):
    """The `export` step's own flags."""
    parser.add_argument("--format", required=True, help="onnx, saved_model or litert")
    parser.add_argument("--quantize", default="none", help="none or int8 (weights)")
    parser.add_argument("--work-dir", help="cache folder (default: $NLPKIT_WORK_DIR or "
                                           "./work); exports go to its exports/")


def export_step(lesson, find_run, args):
    """`export`: the model of the run `find_run()` gives (`lesson.exportable`) in
    `--format`, logged to the run."""
    from data_prep.cache import work_dir
    from workflows.core import models

    check_choice("--format", args.format, FORMATS)
    check_choice("--quantize", args.quantize, QUANTIZATIONS)
    run = find_run()
    with models.verified_model(run) as local:  # (an export copies files of it)
        folder = export_run(lesson.exportable(run, local), run.info.run_id, args.format,
                            args.quantize, work_dir(args.work_dir) / "exports" / run.info.run_id)
    log_export(run.info.run_id, folder)
    print(f"Logged to run {run.info.run_id} as exports/{folder.name}. Call it (in {folder}, "
          f"as its {USAGE_FILE}):\n\n{usage(folder)}")


def export_run(exportable, run_id, format, quantize, folder):
    """Writes `exportable` in `format` (one of `FORMATS`), quantized to int8 or not, to
    `folder/<format>[-int8]` (replaced atomically), with the example's arrays, the files
    beside it and `usage.py`; returns that folder."""
    check_choice("--format", format, FORMATS)
    check_choice("--quantize", quantize, QUANTIZATIONS)
    name = format + ("" if quantize == "none" else f"-{quantize}")
    target = Path(folder) / name
    partial = target.with_name(f".partial-{name}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model, options = in_float32(exportable.model, exportable.example), {}
    if quantize != "none" and format == "litert":  # the converter's own int8 weights
        import tensorflow as tf

        options["optimizations"] = [tf.lite.Optimize.DEFAULT]
    elif quantize != "none":  # Keras's int8 layers (their inputs quantized on the fly)
        kept = exportable.float_layers
        model.quantize(quantize, filters=(lambda layer: not any(
            part in layer.name for part in kept)) if kept else None)
    keras_format, artifact = FORMATS[format]
    started = time.perf_counter()
    converted(lambda: model.export(str(partial / artifact), format=keras_format,
                                   verbose=False, **options), format)
    seconds = time.perf_counter() - started
    answer, names = ran(lambda: loaded(format, partial / artifact), format)
    example = named_arrays(exportable.example, names)
    import keras  # (here: the steps' --help loads no Keras)

    difference = np.abs(ran(lambda: answer(example), format) - keras.ops.convert_to_numpy(
        model(exportable.example))).max()  # (int8: the quantized model's, LiteRT's float's)
    np.savez(partial / EXAMPLE_FILE, **example)
    for file, value in {**exportable.beside, "export.json": {
            "run_id": run_id, "format": format, "quantize": quantize, "inputs": {
                key: {"shape": ["batch", *array.shape[1:]], "dtype": str(array.dtype)}
                for key, array in example.items()}, "outputs": exportable.outputs,
            "example_max_difference_from_keras": float(difference)}}.items():
        (partial / file).write_text(json.dumps(value, ensure_ascii=False, indent=1),
                                    encoding="utf-8")
    for file, source in exportable.copies.items():
        (partial / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, partial / file)
    (partial / USAGE_FILE).write_text(USAGE[format].format(artifact=artifact), "utf-8")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    print(f"Exported run {run_id[:12]} as {name} in {seconds:.1f} s: {target} "
          f"({folder_size(target) / 1e6:.2f} MB)")
    return target


def converted(export, format):
    """Runs `export`; a converter or runtime that is missing, or that cannot convert
    the model, is one line (`ExportFailedError`)."""
    try:
        return export()
    except ImportError as error:
        raise ExportFailedError(f"--format {format} needs {error.name}: pip install "
                                f"{RUNTIMES[format]}" if error.name else
                                f"--format {format}: {error}") from error
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise ExportFailedError(f"Keras could not export this model as {format}: {first}. "
                                "Another --format may take it.") from error


def ran(run, format):
    """`run()` (loading or running the artifact); a runtime that cannot is one line."""
    try:
        return run()
    except Exception as error:  # noqa: BLE001  any runtime's own error type (onnxruntime's Fail)
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ExportFailedError(f"The {format} runtime cannot run this model ({first}): the "
                                "format lacks an operation it needs (a recurrent layer's "
                                "loop, in LiteRT), or the converter got it wrong; another "
                                "--format may take it.") from None


HALF_PRECISIONS = ("bfloat16", "float16", "mixed_bfloat16", "mixed_float16")


def in_float32(model, example):
    """`model`, called on `example`; or where a layer computes in a half precision (the
    `cpu` translator's mixed_bfloat16), a copy of it built in float32 with its weights,
    which every format's converter takes (tf2onnx has no bfloat16)."""
    import keras

    config = keras.saving.serialize_keras_object(model)
    if not _names_half_precision(config):
        model(example)  # (a model is exported once it was called)
        return model
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        copy = keras.saving.deserialize_keras_object(_in_float32(config))
        copy(example)
    finally:
        keras.config.set_dtype_policy(previous)
    copy.set_weights(model.get_weights())
    return copy


def _names_half_precision(config):
    if isinstance(config, dict):
        return any(_is_half(value) if key == "dtype" else _names_half_precision(value)
                   for key, value in config.items())
    return isinstance(config, list) and any(_names_half_precision(item) for item in config)


def _is_half(dtype):
    """Whether a layer config's `dtype` (a policy's name or its serialized form) is half."""
    name = dtype.get("config", {}).get("name") if isinstance(dtype, dict) else dtype
    return name in HALF_PRECISIONS


def _in_float32(config):
    if isinstance(config, dict):
        return {key: "float32" if key == "dtype" and _is_half(value) else _in_float32(value)
                for key, value in config.items()}
    return [_in_float32(item) for item in config] if isinstance(config, list) else config


def check_choice(flag, value, choices):
    if value not in choices:
        raise ConfigError(f"{flag} {value!r} is not one of: {', '.join(choices)}.")


def loaded(format, path):
    """`(answer, input names)` of the artifact at `path`: `answer(arrays)` runs it in
    the format's own runtime on a dict of arrays by those names (as `usage.py` does)."""
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return (lambda arrays: session.run(None, arrays)[0],
                [item.name for item in session.get_inputs()])
    if format == "litert":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(str(path)).get_signature_runner()
        return (lambda arrays: next(iter(runner(**arrays).values())),
                sorted(runner.get_input_details()))
    import tensorflow as tf

    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    return (lambda arrays: next(iter(serve(**{name: tf.constant(array) for name, array in
                                              arrays.items()}).values())).numpy(),
            sorted(serve.structured_input_signature[1]))


def load_export(folder):
    """`(answer, input names)` of the export in `folder` (`loaded`)."""
    settings = json.loads((Path(folder) / "export.json").read_text("utf-8"))
    return loaded(settings["format"], Path(folder) / FORMATS[settings["format"]][1])


def named_arrays(example, names):
    """The example's arrays by the artifact's input names: a dict's by its keys (matched
    to a name that ends with the key), one array by the only name."""
    if not isinstance(example, dict):
        (name,) = names
        return {name: np.asarray(example)}
    return {name: np.asarray(next(value for key, value in example.items()
                                  if name == key or name.endswith(key)))
            for name in names}


def folder_size(path):
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(
        file.stat().st_size for file in path.rglob("*") if file.is_file())


def log_export(run_id, folder):
    """Logs the export's folder to run `run_id`, under `exports/<its name>`."""
    import mlflow

    from workflows.core import store

    store.check_store()
    with mlflow.start_run(run_id=run_id):
        mlflow.log_artifacts(str(folder), f"exports/{Path(folder).name}")


def usage(folder):
    """How to call the export in `folder`, as its `usage.py` says (run there)."""
    return (Path(folder) / USAGE_FILE).read_text("utf-8")


# Five lines of the format's runtime that run in the export's folder: the example's
# arrays in, the answers out (no Keras, no kit)
USAGE = {
    "onnx": """import numpy as np, onnxruntime
session = onnxruntime.InferenceSession("{artifact}", providers=["CPUExecutionProvider"])
inputs = dict(np.load("example_inputs.npz"))  # export.json: their shapes and types
(answers,) = session.run(None, inputs)
print(answers.tolist())  # export.json: what they are
""",
    "saved_model": """import numpy as np, tensorflow as tf
serve = tf.saved_model.load("{artifact}").signatures["serving_default"]
inputs = {{name: tf.constant(array) for name, array in np.load("example_inputs.npz").items()}}
(answers,) = serve(**inputs).values()
print(answers.numpy().tolist())  # export.json: what they are
""",
    "litert": """import numpy as np
from ai_edge_litert.interpreter import Interpreter
runner = Interpreter("{artifact}").get_signature_runner()
(answers,) = runner(**np.load("example_inputs.npz")).values()
print(answers.tolist())  # export.json: what they are
""",
}
