"""Start-up for command-line entry points: TensorFlow without its log noise, one error policy."""

import contextlib
import errno
import importlib.abc
import importlib.machinery
import importlib.util
import os
import platform
import re
import signal
import sys
import threading
import types


def quiet_tensorflow():
    """Imports TensorFlow with its C++ start-up messages silenced.

    TensorFlow prints oneDNN/CUDA notices to stderr before its logging is configured,
    so no environment variable hides them; stderr is muted during the import and the
    first device probe (where a machine without a GPU driver logs a cuInit error) only.
    Set `NLPKIT_VERBOSE=1` to see them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # its runtime notices too (oneDNN)
    if (os.environ.get("NLPKIT_VERBOSE") or "tensorflow" in sys.modules
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


# What a command may need but `--help` and a mistyped flag never do: loaded on first use.
HEAVY_PACKAGES = ("tensorflow", "tensorflow_text", "keras", "keras_hub", "jax", "mlflow",
                  "matplotlib", "optuna", "gensim", "sklearn", "scipy", "pandas", "sacrebleu")


class _DeferredImports(importlib.abc.MetaPathFinder):
    """Makes `import keras` (and the other `HEAVY_PACKAGES`) give a module that loads on
    first use; TensorFlow loads with its start-up noise muted (`quiet_tensorflow`)."""

    def find_spec(self, name, path, target=None):
        if name not in HEAVY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _DeferredLoader(spec.loader, muted=name == "tensorflow")
        return spec


class _DeferredLoader(importlib.abc.Loader):
    def __init__(self, loader, muted=False, on_import=False):
        self.loader, self.muted, self.on_import = loader, muted, on_import

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # Without `__path__`, importing a submodule first runs the package itself; without
        # `__spec__` (`on_import`), so does any later `import` of the module.
        hidden = ("__path__", "__spec__") if self.on_import else ("__path__",)
        module.__dict__["_deferred"] = (self, {name: module.__dict__.pop(name)
                                               for name in hidden if name in module.__dict__})
        module.__class__ = _DeferredModule


class _DeferredModule(types.ModuleType):
    """A module not run yet: any attribute it lacks runs it (once, under a lock)."""

    def __getattr__(self, attr):
        with _LOADING:
            if "_deferred" in self.__dict__:
                deferred, hidden = self.__dict__.pop("_deferred")
                self.__class__ = types.ModuleType
                self.__dict__.update(hidden)
                with _stderr_muted() if deferred.muted else contextlib.nullcontext():
                    deferred.loader.exec_module(self)
                    if deferred.muted:
                        self.config.list_physical_devices()  # CUDA's probe errors muted too
        return types.ModuleType.__getattribute__(self, attr)


_LOADING = threading.RLock()


def deferred(name):
    """The module `name`, run on its first use or when anything imports it: a lesson
    imports its heavy machinery this way, so `--help` never loads it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = _DeferredLoader(spec.loader, on_import=True)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def loaded(name):
    """Whether module `name` has run (imported, and not merely deferred)."""
    module = sys.modules.get(name)
    return module is not None and not isinstance(module, _DeferredModule)


def defer_heavy_imports():
    """Installs the deferred imports (once): a command answers `--help` or a mistake
    without loading TensorFlow, Keras or MLflow."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # its runtime notices too (oneDNN)
    if not any(isinstance(finder, _DeferredImports) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferredImports())


def run_main(main):
    """The `__main__` of every command: quiet start-up, one-line user errors, exit status.

    Ctrl-C ends the command with status 130 and one line instead of a traceback;
    SIGTERM and SIGHUP (a scheduler stopping the job, the terminal closed) act as Ctrl-C,
    so a training checkpoints and a search stops its workers before the command ends.
    """
    defer_heavy_imports()
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
