"""Headless Chromium against the MLflow UI on loopback: the browser test's and
`benchmarks/ui_screenshots.py`'s one way to load a page and wait for what it shows."""

import re
import shutil
import subprocess
import tempfile

CHROMIUM = next(filter(None, map(shutil.which, (
    "chromium", "chromium-browser", "google-chrome", "chrome-headless-shell"))), None)


def headless(url, *flags, window="1400,1000"):
    """Chromium's output for `url` after its scripts ran (`--dump-dom`: the DOM), with
    `flags` (`--screenshot=FILE` too). A fresh profile, and no background traffic: a
    closed network refuses it noisily."""
    with tempfile.TemporaryDirectory() as profile:
        command = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--disable-quic",
                   "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                   "--virtual-time-budget=25000", f"--window-size={window}", *flags, url]
        return subprocess.run(command, capture_output=True, text=True, timeout=240).stdout


def visible_text(page):
    """The words a dumped page shows, without its scripts, styles and tags."""
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", page)).strip()


def rendered(url, *expected, flags=(), window="1400,1000", tries=6):
    """Chromium's DOM of `url` once it shows every `expected` text (`flags`, such as a
    screenshot, are taken with that same load).

    The UI's script fetches the run and then each chart's history after the page loads,
    and Chromium's virtual time does not always wait for them (CI once saw the chart view
    empty; here the main job's charts were spinners in most loads), so the page is loaded
    again, `tries` times at most. Raises AssertionError with what the page showed if it
    never shows them."""
    for _ in range(tries):
        page = headless(url, "--dump-dom", *flags, window=window)
        if all(text in page for text in expected):
            return page
    raise AssertionError(f"{url} never showed {expected}; it shows: {visible_text(page)[:2000]}")
