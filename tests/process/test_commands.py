import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A command whose library swallows the stop and raises its own error in its place, as
# pydantic does when a stop lands in the schema build under `import mlflow`
SWALLOWING_COMMAND = textwrap.dedent("""
    import sys, time
    from process.commands import run_main

    def main(argv):
        print("ready", flush=True)
        try:
            time.sleep(30)
        except KeyboardInterrupt as stop:
            raise RuntimeError(f"schema build failed: {stop!r}") from None
        return 0

    run_main(main)
""")


def stopped_after_first_line(code, first_line, wait, stop_signal, environment=()):
    """Runs `code` (with `environment`'s variables), checks its first line, sends
    `stop_signal` `wait` seconds later; returns the ended process, the rest of its stdout
    and its stderr."""
    command = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": ROOT, **dict(environment)})
    assert command.stdout.readline() == first_line
    time.sleep(wait)
    command.send_signal(stop_signal)
    return (command, *command.communicate(timeout=20))


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_a_library_turns_into_its_own_error_is_still_one_line_and_130(stop_signal):
    command, _, errors = stopped_after_first_line(SWALLOWING_COMMAND, "ready\n", 0.2,
                                                  stop_signal)
    assert command.returncode == 130
    assert "Traceback" not in errors
    assert errors.strip() == "Interrupted."


def test_an_error_with_no_stop_behind_it_still_shows_its_traceback():
    failing = "from process.commands import run_main\n" \
              "def main(argv):\n    raise RuntimeError('a bug')\nrun_main(main)\n"
    result = subprocess.run([sys.executable, "-c", failing], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": ROOT}, timeout=20)
    assert result.returncode == 1
    assert "RuntimeError: a bug" in result.stderr


# A command that has finished its work and whose interpreter takes a while to shut down
# (as JAX's and TensorFlow's do): the stop lands after its last line
SLOW_SHUTDOWN_COMMAND = textwrap.dedent("""
    import time
    from process.commands import run_main

    class SlowToCollect:
        sleep = time.sleep

        def __del__(self):
            self.sleep(1.5)

    def main(argv):
        print("done", flush=True)
        return 0

    keeper = SlowToCollect()
    run_main(main)
""")


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_after_the_command_finished_leaves_its_status_and_says_nothing(stop_signal):
    command, _, errors = stopped_after_first_line(SLOW_SHUTDOWN_COMMAND, "done\n", 0.5,
                                                  stop_signal)  # in the interpreter's shutdown
    assert (command.returncode, errors) == (0, "")


# A stand-in for the backend's library whose import takes half a second: the stop lands in it
SLOW_LIBRARY = textwrap.dedent("""
    import pathlib, sys, time, types

    print("importing", flush=True)
    time.sleep(0.5)
    config = types.SimpleNamespace(list_physical_devices=lambda: [])  # as TensorFlow's
    pathlib.Path(__file__).with_name("imported").touch()
""")
IMPORTING_COMMAND = textwrap.dedent("""
    from process.commands import import_backend, run_main

    def main(argv):
        import_backend()
        print("after the import", flush=True)
        return 0

    run_main(main)
""")


def importing_environment(folder, backend, import_seconds):
    """The variables of a command whose backend (`backend`) is a stand-in in `folder`."""
    (folder / backend).mkdir()
    (folder / backend / "__init__.py").write_text(
        SLOW_LIBRARY.replace("time.sleep(0.5)", f"time.sleep({import_seconds})"))
    return {"PYTHONPATH": f"{folder}{os.pathsep}{ROOT}", "KERAS_BACKEND": backend}


@pytest.mark.parametrize("backend, stop_signal", [("tensorflow", signal.SIGINT),
                                                  ("tensorflow", signal.SIGTERM),
                                                  ("jax", signal.SIGTERM)])
def test_a_stop_during_the_backends_import_waits_for_its_end_then_is_one_line_and_130(
        backend, stop_signal, tmp_path):
    # an exception raised inside TensorFlow's or jaxlib's import can crash the interpreter
    command, output, errors = stopped_after_first_line(
        IMPORTING_COMMAND, "importing\n", 0.1, stop_signal,
        importing_environment(tmp_path, backend, 0.5))
    assert (command.returncode, output, errors.strip()) == (130, "", "Interrupted.")
    assert (tmp_path / backend / "imported").exists()  # the import was not broken off


def test_an_import_longer_than_the_grace_period_is_ended_with_its_line_on_the_real_stderr(
        tmp_path):
    environment = {**importing_environment(tmp_path, "tensorflow", 10.0),
                   "NLPKIT_STOP_GRACE_SECONDS": "1"}
    started = time.monotonic()
    command, output, errors = stopped_after_first_line(IMPORTING_COMMAND, "importing\n", 0,
                                                       signal.SIGTERM, environment)
    assert time.monotonic() - started < 5
    assert (command.returncode, output, errors.strip()) == (
        130, "", "Stopped 1 s after the signal.")  # said although stderr was muted
    assert not (tmp_path / "tensorflow" / "imported").exists()


EXIT_FUNCTIONS_COMMAND = textwrap.dedent("""
    import atexit, time
    from pathlib import Path
    from process.commands import run_main

    def main(argv):
        atexit.register(Path(MARKER).write_text, "ran")
        atexit.register(lambda: 1 / 0)  # a failing one is not the user's concern at a stop
        print("working", flush=True)
        time.sleep(60)

    run_main(main)
""")


def test_a_stopped_command_runs_its_exit_functions_quietly(tmp_path):
    # e.g. TensorFlow's removal of its autograph files from the temporary folder
    marker = tmp_path / "exit_functions"
    command, output, errors = stopped_after_first_line(
        EXIT_FUNCTIONS_COMMAND.replace("MARKER", repr(str(marker))), "working\n", 0,
        signal.SIGTERM)
    assert (command.returncode, output, errors.strip()) == (130, "", "Interrupted.")
    assert marker.read_text() == "ran"


WATCHER_MASK_COMMAND = textwrap.dedent("""
    import threading
    from process.commands import run_main

    def main(argv):
        watcher = next(t for t in threading.enumerate() if t.name == "forced-stop")
        status = open(f"/proc/self/task/{watcher.native_id}/status").read()
        print(next(line for line in status.splitlines() if line.startswith("SigBlk:")))

    run_main(main)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_the_forced_stop_thread_leaves_every_stop_signal_to_the_main_thread():
    # a signal delivered to it would not interrupt the main thread's sleep or read: the
    # command would run on until the forced stop (seen once in the quick tier, 8 s)
    result = subprocess.run([sys.executable, "-c", WATCHER_MASK_COMMAND], cwd=ROOT,
                            capture_output=True, text=True, timeout=20,
                            env={**os.environ, "PYTHONPATH": ROOT})
    blocked = int(result.stdout.split()[1], 16)
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        assert blocked >> (stop_signal - 1) & 1, stop_signal


CPU_INFO = """processor\t: {index}
vendor_id\t: {vendor}
cpu family\t: 25
model\t\t: 17
model name\t: {name}
flags\t\t: fpu sse2 avx avx2 {extra}
"""


@pytest.mark.parametrize("name, extra, expected", [
    ("AMD EPYC", "avx512f avx512_bf16", "AMD EPYC, family 25 model 17, AVX-512, bfloat16"),
    ("AMD EPYC", "", "AMD EPYC, family 25 model 17, AVX2"),
    ("Intel(R) Xeon(R) Platinum 8480+", "avx512f amx_bf16",
     "Intel(R) Xeon(R) Platinum 8480+, AVX-512, bfloat16"),
])
def test_the_cpu_model_tells_apart_machines_that_share_a_generic_name(tmp_path, name, extra,
                                                                       expected):
    from process.commands import cpu_model

    info = tmp_path / "cpuinfo"  # two cores: only the first one's block is read
    info.write_text("\n".join(CPU_INFO.format(index=index, vendor="x", name=name, extra=extra)
                              for index in range(2)))
    assert cpu_model(info) == expected
    assert cpu_model(tmp_path / "absent")  # not Linux: what `platform` knows


def test_a_read_only_tracking_store_is_one_line_and_status_2(capsys):
    import sqlite3

    from process.errors import run_command

    def write_to_the_store(argv):
        try:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        except sqlite3.OperationalError as error:
            raise RuntimeError("(sqlite3.OperationalError) INSERT INTO experiments ...") from error

    assert run_command(write_to_the_store) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the tracking store is read-only" in err
