"""How a command stops: Ctrl-C, SIGTERM and SIGHUP deferred to the end of the batch
under way while a trainer runs (`Stop`), raised at once elsewhere, and never later than
a grace period after the signal (`ForcedStop`); `exit_at_once` ends the process without
the interpreter's slow shutdown. `commands.run_main` installs them; the training core
reads them."""

import atexit
import contextlib
import os
import signal
import sys
import threading
import time

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


def interrupt(signum, frame):
    """The handler of every stop signal (`commands.run_main` installs it)."""
    if Stop.redelivering:  # the same stop, raised again (`redeliver_swallowed_stop`)
        Stop.redelivering = False
        raise KeyboardInterrupt
    Stop.requested = True
    Stop.signals += 1
    if Stop.signals == 1 and Stop.deferring:
        return
    raise KeyboardInterrupt


def redeliver_swallowed_stop(unraisable):
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
    unmuted_stderr = None  # stderr's own file descriptor while a command mutes it

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
        # started with the stop signals blocked (a thread inherits its starter's mask): the
        # kernel hands a process's signal to any thread that does not block it, and one
        # delivered to this thread would not interrupt the main thread's sleep or read
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            threading.Thread(target=cls._exit_after_grace, args=(read,), daemon=True,
                             name="forced-stop").start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)

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
        if cls.unmuted_stderr is not None:  # said where the user sees it
            os.dup2(cls.unmuted_stderr, 2)
        print(f"\n{line}", file=sys.stderr, flush=True)
        os._exit(130)



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
