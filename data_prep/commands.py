"""How every command of the kit starts, stops and fails: TensorFlow without its start-up
noise, Ctrl-C and SIGTERM as one line, one error policy (`UserError`: one line, status 2).
"""

import atexit
import contextlib
import errno
import importlib.util
import os
import platform
import re
import signal
import sys
import threading
import time


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
    global _unmuted_stderr
    if os.environ.get("NLPKIT_VERBOSE"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        _unmuted_stderr = saved
        yield
    finally:
        _unmuted_stderr = None
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


_unmuted_stderr = None  # stderr's own file descriptor while `_stderr_muted` mutes it


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
    global command_started
    command_started = time.monotonic()
    quiet_start()
    for stop_signal in STOP_SIGNALS:
        # Ctrl-C too, even where it was ignored when the command started (a job started
        # with `&` by a script): the command and its workers always stop on it
        signal.signal(stop_signal, _interrupt)
    sys.unraisablehook = _redeliver_swallowed_stop
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


def exit_at_once(status):
    """Ends the process without the interpreter's own shutdown (JAX's and TensorFlow's
    take seconds): the exit functions run (TensorFlow's removal of its temporary files
    among them, quick), with stop signals ignored meanwhile (the forced stop still bounds
    them) and their failures unsaid, then the process exits."""
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, signal.SIG_IGN)
    sys.unraisablehook = lambda unraisable: None
    atexit._run_exitfuncs()  # noqa: SLF001
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


# ## Stopping: at once, or at the next batch's end while a trainer runs, never later than
# a grace period after the signal

command_started = None  # `time.monotonic()` when the command began (`run_main`)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_SECONDS = float(os.environ.get("NLPKIT_STOP_GRACE_SECONDS", "8"))


class Stop:
    """Whether a stop signal came, and who handles it: inside a `deferred` block the
    signal only sets `requested`, checked by the block's owner (a trainer stops at the
    end of the batch under way, where the model's real weights can be read: on JAX they
    live outside the model during `fit` and `evaluate`; TensorFlow's import ends first);
    elsewhere it raises `KeyboardInterrupt` at once. A second signal always raises at
    once."""

    requested = False
    signals = 0
    deferring = 0
    redelivering = False
    reported = False  # what the stop kept was said

    @classmethod
    @contextlib.contextmanager
    def deferred(cls):
        """Defers stop signals to the owner's own check of `requested` while it runs."""
        cls.deferring += 1
        try:
            yield
        finally:
            cls.deferring -= 1

    @classmethod
    def raise_if_requested(cls):
        """After a `deferred` block: the stop that came while it ran (a trainer's: once
        no batch was left to end it)."""
        if cls.requested:
            raise KeyboardInterrupt


def _interrupt(signum, frame):
    if Stop.redelivering:  # the same stop, raised again (`_redeliver_swallowed_stop`)
        Stop.redelivering = False
        raise KeyboardInterrupt
    Stop.requested = True
    Stop.signals += 1
    if Stop.signals == 1 and Stop.deferring:
        return
    raise KeyboardInterrupt


def _redeliver_swallowed_stop(unraisable):
    """A stop raised where Python ignores exceptions (a garbage-collector callback, such
    as JAX's, or a `__del__`) would vanish: it is raised again as soon as the interpreter
    is back in the command's own code."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and Stop.requested:
        import _thread

        Stop.redelivering = True  # from another thread, once this callback has returned
        threading.Timer(0.02, _thread.interrupt_main).start()
        return
    sys.__unraisablehook__(unraisable)


class ForcedStop:
    """The backstop: a thread woken by the signal itself (Python's wake-up file, written
    by the C handler even while the interpreter is held by a compilation or a device
    call) ends the process `grace` seconds later if it is still running, saying what
    is kept (`kept()`, set by a training: its last checkpoint). Checkpoints are written
    atomically, so an exit at any moment leaves the last one intact."""

    grace = STOP_GRACE_SECONDS

    @classmethod
    def allow(cls, seconds):
        """A command whose stop waits for processes of its own (a tune's workers, a
        server) is forced no sooner than `seconds` after the signal."""
        cls.grace = max(cls.grace, seconds)

    @staticmethod
    def kept():
        """What a stop now keeps, in words (None: nothing to say)."""
        return None

    @classmethod
    def watch(cls):
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: nothing to watch from here
            return
        threading.Thread(target=cls._exit_after_grace, args=(read,), daemon=True,
                         name="forced-stop").start()

    @classmethod
    def _exit_after_grace(cls, read):
        while not set(os.read(read, 64)) & {int(number) for number in STOP_SIGNALS}:
            pass
        signalled = time.monotonic()
        while (left := signalled + cls.grace - time.monotonic()) > 0:
            time.sleep(left)  # `grace` may have grown meanwhile
        try:
            kept = cls.kept()
        except Exception:  # noqa: BLE001  the exit must not wait on a broken description
            kept = None
        line = f"Stopped {cls.grace:.0f} s after the signal" + (f": {kept}" if kept else ".")
        if _unmuted_stderr is not None:  # said where the user sees it
            os.dup2(_unmuted_stderr, 2)
        print(f"\n{line}", file=sys.stderr, flush=True)
        os._exit(130)


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
        if read_only_store(error):
            print("error: the tracking store is read-only (attempt to write a readonly "
                  "database): make its file and folder writable, or set MLFLOW_TRACKING_URI "
                  "to a store you can write; reading commands (compare) work as they are.",
                  file=sys.stderr)
            return 2
        full = disk_full(error)
        if full is None:
            raise
        if "database or disk is full" in str(full):  # the tracking store's disk
            print("error: the disk under the tracking store is full: free some space there "
                  "(or set MLFLOW_TRACKING_URI to a store on another disk), then rerun the "
                  "same command; a training picks up from its last checkpoint.",
                  file=sys.stderr)
            return 2
        where = f" writing {full.filename}" if getattr(full, "filename", None) else ""
        print(f"error: no space left on the disk{where}: free some space (or point "
              "NLPKIT_WORK_DIR elsewhere), then rerun the same command; it picks up from "
              "its last checkpoint or cache entry.", file=sys.stderr)
        return 2


def read_only_store(error):
    """Whether SQLite, somewhere in `error`'s chain, refused to write its database."""
    while error is not None:
        if "attempt to write a readonly database" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


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
