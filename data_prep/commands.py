"""How every command of the kit starts, stops and fails: TensorFlow without its start-up
noise, Ctrl-C and SIGTERM as one line, one error policy (`UserError`: one line, status 2).
"""

import contextlib
import errno
import importlib.util
import os
import platform
import re
import signal
import sys


def quiet_tensorflow():
    """Imports TensorFlow (the Keras backend by default) with its C++ start-up messages
    silenced: what a step that builds or loads a model calls first.

    TensorFlow prints oneDNN/CUDA notices to stderr before its logging is configured,
    so no environment variable hides them; stderr is muted during the import and the
    first device probe (where a machine without a GPU driver logs a cuInit error) only.
    Set `NLPKIT_VERBOSE=1` to see them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # its runtime notices too (oneDNN)
    if (os.environ.get("NLPKIT_VERBOSE") or "tensorflow" in sys.modules
            or os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow"
            or importlib.util.find_spec("tensorflow") is None):  # e.g. a JAX-only machine
        return
    with _stderr_muted():
        import tensorflow

        tensorflow.config.list_physical_devices()  # probes CUDA now: its errors muted too


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
        yield
    finally:
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
    Heavy libraries (TensorFlow, Keras, MLflow) are imported inside the steps that use
    them, so `--help` and a mistyped flag answer at once.
    """
    quiet_start()
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, _interrupt)
    # Ctrl-C too, even where it was ignored when the command started (a job started
    # with `&` by a script): the command and its workers always stop on it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = run_command(main)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        status = 130
    sys.exit(status)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cpu_model():
    """The CPU's model name (Linux: from /proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ## The one exception type for mistakes a user can fix, and how every CLI reports it

class UserError(Exception):
    """Something the user gave or asked for is wrong; the message says what to do."""


def run_command(main, argv=None):
    """`main(argv)`'s exit status; a `UserError` is one `error:` line and status 2, and
    so are a full disk (what to free, and that the command picks up where it stopped)
    and a file the command may not write."""
    try:
        return main(argv)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        if isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            print(f"error: cannot write {error.filename or 'a file'} ({error.strerror}): "
                  "choose a work folder you can write (--work-dir or NLPKIT_WORK_DIR), or "
                  "fix its permissions.", file=sys.stderr)
            return 2
        full = disk_full(error)
        if full is None:
            raise
        where = f" writing {full.filename}" if getattr(full, "filename", None) else ""
        print(f"error: no space left on the disk{where}: free some space (or point "
              "NLPKIT_WORK_DIR elsewhere), then rerun the same command; it picks up from "
              "its last checkpoint or cache entry.", file=sys.stderr)
        return 2


SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # NumPy's words for it


def disk_full(error):
    """The error in `error`'s chain that says the disk (or a database on it) is full, or
    None: an OSError with ENOSPC or EDQUOT, or the words h5py, SQLite and NumPy use."""
    while error is not None:
        if (isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)) \
                or "No space left on device" in str(error) \
                or "database or disk is full" in str(error) \
                or (isinstance(error, OSError) and SHORT_WRITE.search(str(error))):
            return error
        error = error.__cause__ or error.__context__
    return None
