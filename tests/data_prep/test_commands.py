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
    from data_prep.commands import run_main

    def main(argv):
        print("ready", flush=True)
        try:
            time.sleep(30)
        except KeyboardInterrupt as stop:
            raise RuntimeError(f"schema build failed: {stop!r}") from None
        return 0

    run_main(main)
""")


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_a_library_turns_into_its_own_error_is_still_one_line_and_130(stop_signal):
    command = subprocess.Popen([sys.executable, "-c", SWALLOWING_COMMAND], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": ROOT})
    assert command.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    command.send_signal(stop_signal)
    _, errors = command.communicate(timeout=20)
    assert command.returncode == 130
    assert "Traceback" not in errors
    assert errors.strip() == "Interrupted."


def test_an_error_with_no_stop_behind_it_still_shows_its_traceback():
    failing = "from data_prep.commands import run_main\n" \
              "def main(argv):\n    raise RuntimeError('a bug')\nrun_main(main)\n"
    result = subprocess.run([sys.executable, "-c", failing], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": ROOT}, timeout=20)
    assert result.returncode == 1
    assert "RuntimeError: a bug" in result.stderr


# A command that has finished its work and whose interpreter takes a while to shut down
# (as JAX's and TensorFlow's do): the stop lands after its last line
SLOW_SHUTDOWN_COMMAND = textwrap.dedent("""
    import time
    from data_prep.commands import run_main

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
    command = subprocess.Popen([sys.executable, "-c", SLOW_SHUTDOWN_COMMAND], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": ROOT})
    assert command.stdout.readline() == "done\n"
    time.sleep(0.5)  # in the interpreter's shutdown
    command.send_signal(stop_signal)
    _, errors = command.communicate(timeout=20)
    assert (command.returncode, errors) == (0, "")
