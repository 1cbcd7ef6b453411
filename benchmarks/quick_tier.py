"""How long the README's test command (`python -m pytest`, the quick tier) takes, as a
newcomer runs it: in a fresh clone of each commit, one run at a time.

Commits are taken in turn, round after round, so that a machine whose pace drifts
(a noisy neighbour, a slower period) weighs on each of them alike; compare commits
measured in one run of this script, never figures from different machines.

    python benchmarks/quick_tier.py                        # HEAD, 3 runs
    python benchmarks/quick_tier.py --commits 79cbac1 HEAD --rounds 2
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import write_results  # noqa: E402
from process.commands import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "quick_tier.json"
COMMAND = [sys.executable, "-m", "pytest"]
TIMEOUT_SECONDS = 900


def commit_of(reference):
    """The short hash of `reference`, or None if this repository has no such commit."""
    found = subprocess.run(["git", "rev-parse", "--short", "--verify", "--quiet",
                            f"{reference}^{{commit}}"], cwd=ROOT, capture_output=True, text=True)
    return found.stdout.strip() or None


def timed_run(commit):
    """The quick tier in a fresh clone of `commit`: wall seconds, exit status and
    pytest's closing line (its counts)."""
    with tempfile.TemporaryDirectory() as folder:
        clone = Path(folder) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)],
                       check=True)
        subprocess.run(["git", "checkout", "--quiet", "--detach", commit], cwd=clone,
                       check=True)
        started = time.monotonic()
        try:
            done = subprocess.run(COMMAND, cwd=clone, capture_output=True, text=True,
                                  timeout=TIMEOUT_SECONDS)
            status, output = done.returncode, done.stdout
        except subprocess.TimeoutExpired as expired:
            status, output = "timed out", expired.stdout or ""
        seconds = time.monotonic() - started
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    lines = [line.strip("= ") for line in output.splitlines() if line.strip()]
    return {"commit": commit, "seconds": round(seconds, 1), "status": status,
            "pytest": lines[-1] if lines else ""}


def summary(runs):
    """Per commit: the runs' median, fastest and slowest seconds and the tests passed."""
    by_commit = {}
    for run in runs:
        by_commit.setdefault(run["commit"], []).append(run)
    table = {}
    for commit, own in by_commit.items():
        seconds = [run["seconds"] for run in own]
        passed = {found.group(1) for run in own
                  if (found := re.search(r"(\d+) passed", run["pytest"]))}
        table[commit] = {"runs": len(own), "median_seconds": statistics.median(seconds),
                         "fastest_seconds": min(seconds), "slowest_seconds": max(seconds),
                         "passed": ", ".join(sorted(passed)),
                         "all_succeeded": all(run["status"] == 0 for run in own)}
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/quick_tier.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--commits", nargs="+", default=["HEAD"],
                        help="commits to time, in turn (default: HEAD)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each commit")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    commits = [commit_of(reference) for reference in args.commits]
    if None in commits:
        parser.error(f"--commits: {args.commits[commits.index(None)]} is not a commit of "
                     f"{ROOT}; give a hash, branch or tag (git log shows them)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    load = os.getloadavg()[0]
    runs = []
    for round_ in range(1, args.rounds + 1):
        for commit in commits:
            run = timed_run(commit)
            runs.append({"round": round_, **run})
            print(f"round {round_}, {commit}: {run['seconds']:.1f} s, status {run['status']}: "
                  f"{run['pytest']}", flush=True)
    write_results({"machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                               "load_average_at_start": round(load, 2)},
                   "command": "python -m pytest (in a fresh clone)",
                   "summary": summary(runs), "runs": runs}, args.output)


if __name__ == "__main__":
    main()
