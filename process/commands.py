"""How every command of the kit starts and ends: TensorFlow without its start-up noise,
stop signals handled (`stops`) and errors reported (`errors`: a `UserError` is one line,
status 2) as `run_main` sets them up; the CPU a figure was measured on (`cpu_model`).
"""

import contextlib
import importlib.util
import os
import platform
import signal
import sys
import time

from process import stops
from process.errors import run_command
from process.stops import STOP_SIGNALS, ForcedStop, Stop, exit_at_once


def import_backend():
    """Imports the Keras backend's library (`KERAS_BACKEND`: TensorFlow by default, JAX
    or PyTorch): what a step that builds or loads a model calls first.

    A stop signal during the import waits for its end: an exception raised inside the
    import of TensorFlow or of jaxlib can crash the interpreter (a segmentation fault or
    an abort, with no word said; here about 1 stop in 150 during TensorFlow's import and
    1 in 16 during JAX's). TensorFlow prints oneDNN/CUDA notices to stderr before its
    logging is configured, so no environment variable hides them: stderr is muted during
    its import and first device probe (where a machine without a GPU driver logs a
    cuInit error) only. Set `NLPKIT_VERBOSE=1` to see them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # its runtime notices too (oneDNN)
    library = os.environ.get("KERAS_BACKEND", "tensorflow")
    if (library not in ("tensorflow", "jax", "torch") or library in sys.modules
            or importlib.util.find_spec(library) is None):  # e.g. TensorFlow on a JAX machine
        return
    muted = _stderr_muted() if library == "tensorflow" else contextlib.nullcontext()
    with Stop.deferred(), muted:
        module = importlib.import_module(library)
        if library == "tensorflow":
            module.config.list_physical_devices()  # probes CUDA now: its errors muted too
    Stop.raise_if_requested()


@contextlib.contextmanager
def _stderr_muted():
    if os.environ.get("NLPKIT_VERBOSE"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        ForcedStop.unmuted_stderr = saved
        yield
    finally:
        ForcedStop.unmuted_stderr = None
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_start():
    """What every command does first: TensorFlow's runtime notices (oneDNN) off."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def run_main(main):
    """The `__main__` of every command: quiet start-up, one-line user errors, exit status.

    Ctrl-C ends the command with status 130 and one line instead of a traceback;
    SIGTERM and SIGHUP (a scheduler stopping the job, the terminal closed) act as Ctrl-C,
    so a training checkpoints and a search stops its workers before the command ends.
    Once the command has finished, a stop signal is ignored: the interpreter's shutdown
    ends with the command's own status.
    Whatever the command is doing (an XLA compilation, a device call that holds the
    interpreter), it ends within `STOP_GRACE_SECONDS` of the signal (`ForcedStop`).
    Heavy libraries (TensorFlow, Keras, MLflow) are imported inside the steps that use
    them, so `--help` and a mistyped flag answer at once.
    """
    stops.command_started = time.monotonic()
    quiet_start()
    for stop_signal in STOP_SIGNALS:
        # Ctrl-C too, even where it was ignored when the command started (a job started
        # with `&` by a script): the command and its workers always stop on it
        signal.signal(stop_signal, stops.interrupt)
    sys.unraisablehook = stops.redeliver_swallowed_stop
    ForcedStop.watch()
    try:
        status = run_command(main)
    except (KeyboardInterrupt, Exception) as error:
        # a library may turn the stop into its own error (pydantic's schema build, under
        # an import of MLflow, raises a SchemaError around it): after a stop signal, any
        # error is the stop
        if not (isinstance(error, KeyboardInterrupt) or Stop.requested):
            raise
        if not Stop.reported:  # a training says what it kept itself
            kept = ForcedStop.kept()
            print(f"Interrupted: {kept}" if kept else "Interrupted.", file=sys.stderr)
        exit_at_once(130)
    for stop_signal in STOP_SIGNALS:  # finished: a stop during the interpreter's shutdown
        signal.signal(stop_signal, signal.SIG_IGN)  # would only turn status 0 into 143
    sys.exit(status)


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name (Linux: from `cpuinfo`), else what `platform` knows.

    Virtual machines often name only the maker's line ("AMD EPYC"): then its family and
    model numbers follow; and the widest vector instructions and bfloat16, which set a
    CPU's pace in training, always do (e.g. "AMD EPYC, family 25 model 17, AVX-512,
    bfloat16")."""
    try:
        with open(cpuinfo) as info:
            first_core = info.read().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    fields = {key.strip(): value.strip() for key, colon, value in
              (line.partition(":") for line in first_core.splitlines()) if colon}
    parts = [fields.get("model name") or platform.processor() or platform.machine()]
    if not any(character.isdigit() for character in parts[0]) and "cpu family" in fields:
        parts.append(f"family {fields['cpu family']} model {fields.get('model', '?')}")
    flags = set(fields.get("flags", "").split())
    vector = next((name for flag, name in VECTOR_SETS if flag in flags), None)
    parts += [vector] if vector else []
    parts += ["bfloat16"] if flags & {"avx512_bf16", "amx_bf16"} else []
    return ", ".join(parts)


VECTOR_SETS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"))


