"""Progress of long steps: a live line in a terminal, one line when done in a log file."""

import sys
import time


class Progress:
    """Counts work done towards `total`; use as a context manager.

    In a terminal the line `label: done/total (percent) seconds` updates in place (at
    most five times a second); otherwise nothing is printed until the end, so log files
    stay short. Either way one final line says how much was done and how long it took.
    """

    def __init__(self, label, total, stream=None):
        self.label, self.total, self.count = label, total, 0
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self.started = self.shown = time.perf_counter()

    def __enter__(self):
        return self

    def advance(self, amount=1):
        self.count += amount
        now = time.perf_counter()
        if self.live and now - self.shown >= 0.2:
            self.shown = now
            self.stream.write(f"\r{self._line(now)}")
            self.stream.flush()

    def __exit__(self, *exc_info):
        end = "\n" if exc_info[0] is None else " (stopped)\n"
        self.stream.write(("\r" if self.live else "") + self._line(time.perf_counter()) + end)
        self.stream.flush()

    def _line(self, now):
        share = f" ({self.count / self.total:.0%})" if self.total else ""
        return (f"{self.label}: {self.count:,}/{self.total:,}{share}, "
                f"{now - self.started:.1f} s")
