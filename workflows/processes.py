"""Run a server in its own process group in the foreground; Ctrl-C stops all of it."""

import os
import signal
import subprocess
import time


def run_until_stopped(command, name, banner, env=None):
    """Starts `command` in its own process group, prints `banner`, and waits.

    Ctrl-C, SIGTERM or SIGHUP (the terminal closed) stops the whole group, workers
    included; returns the exit status.
    """
    process = subprocess.Popen(command, start_new_session=True, env=env)
    print(banner, flush=True)
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a parent may ignore SIGINT
        signal.signal(stop_signal, _interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        stop(process)
        print(f"{name} stopped.", flush=True)
        return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def stop(process, timeout=10):
    """Stops a process group: SIGTERM, then SIGKILL if any member outlives `timeout` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        if _group_ended(process, timeout):
            return


def _group_ended(process, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.poll()  # reap the leader
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
