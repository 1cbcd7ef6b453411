"""How much of the kit a training passes through: `results/lesson_paths.json`.

For each command, on tiny generated data in a temporary work folder and store: the
project files in which a function runs between the command line and Keras' `fit`
(module bodies, that is imports, not counted; `layers/` not counted), and the modules of
`workflows/` and `data_prep/` in `sys.modules` when the command exits. Issue 47's
targets: at most 12 files for `train --model encoder` (IMDB) and translation `train`;
at most 25 modules for a tiny `bilstm` training.

    python benchmarks/lesson_paths.py
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import machine, write_results  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "lesson_paths.json"
HISTORY = ("The same script on earlier commits (files to fit / modules): 768d541 (before the "
           "lessons called the core as a library) bilstm 22/54, encoder 27/58, translation "
           "27/41; a70ce73 (model families as modules) bilstm 20/41, encoder 21/42, "
           "translation 24/36.")
TINY_RNN = ["--set", "max_tokens=300", "--set", "batch_size=8", "--set", "embed_dim=8",
            "--set", "units=4"]


def commands(encoder):
    return {
        "imdb_sentiment train --model bilstm": [
            "workflows.imdb_sentiment", "train", "--model", "bilstm", "--epochs", "1", *TINY_RNN],
        "imdb_sentiment train --model encoder": [
            "workflows.imdb_sentiment", "train", "--model", "encoder", "--epochs", "1",
            "--set", f"encoder={encoder}", "--set", "batch_size=8",
            "--set", "max_review_tokens=64"],
        "translation train": [
            "workflows.translation", "train", "--preset", "tutorial", "--epochs", "1",
            "--set", "embed_dim=8", "--set", "dense_dim=16", "--set", "num_heads=2"],
    }


def trace(module, argv):
    """Runs `module`'s main on `argv` under a profiler; prints what it passed through."""
    import importlib

    files, importing, reached = [], [0], [False]

    def profile(frame, event, _):
        if reached[0] or event not in ("call", "return"):
            return
        code = frame.f_code
        if code.co_name == "<module>":
            importing[0] += 1 if event == "call" else -1
            return
        if event != "call" or importing[0]:
            return
        if code.co_name == "fit" and "keras" in code.co_filename:
            reached[0] = True
            return
        path = Path(code.co_filename)
        if ROOT in path.parents and path.parts[len(ROOT.parts)] in ("workflows", "data_prep"):
            name = str(path.relative_to(ROOT))
            if name not in files:
                files.append(name)

    lesson = importlib.import_module(module)
    sys.setprofile(profile)
    try:
        status = lesson.main(argv)
    finally:
        sys.setprofile(None)
    modules = sorted(name for name in sys.modules
                     if name.split(".")[0] in ("workflows", "data_prep"))
    print("TRACE " + json.dumps({"status": status, "reached_fit": reached[0],
                                 "files": files, "modules": modules}))


def measure(argv, env):
    done = subprocess.run([sys.executable, __file__, "--trace", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    line = next((line for line in done.stdout.splitlines() if line.startswith("TRACE ")), None)
    if line is None:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    found = json.loads(line[len("TRACE "):])
    return {"files_to_fit": len(found["files"]), "modules_at_exit": len(found["modules"]),
            "reached_fit": found["reached_fit"], "files": found["files"],
            "modules": found["modules"]}


def main():
    from tests.data_prep.fixtures import (
        generated_spa_lines,
        write_imdb_folder,
        write_spa_eng_zip,
        write_tiny_encoder,
    )

    with tempfile.TemporaryDirectory(prefix="lesson-paths-") as folder:
        folder = Path(folder)
        imdb = write_imdb_folder(folder / "imdb", reviews_per_class=24, unlabelled=20).parent
        env = {**os.environ, "NLPKIT_WORK_DIR": str(folder / "work"),
               "NLPKIT_IMDB_PATH": str(imdb),
               "NLPKIT_SPA_ENG_PATH": str(write_spa_eng_zip(folder / "spa-eng.zip",
                                                            generated_spa_lines())),
               "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
        encoder = write_tiny_encoder(folder / "encoder")
        results = {name: measure(argv, env) for name, argv in commands(encoder).items()}
    summary = "; ".join(f"{name}: {result['files_to_fit']} files to fit, "
                        f"{result['modules_at_exit']} modules" for name, result in results.items())
    write_results({
        "title": "How much of the kit a training passes through",
        "record": [f"`python benchmarks/lesson_paths.py` (tiny generated data): {summary}. "
                   "Issue 47's targets: at most 12 files (encoder, translation), at most 25 "
                   "modules (bilstm).", HISTORY],
        "machine": machine(), **results}, RESULTS)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trace"]:
        trace(sys.argv[2], sys.argv[3:])
    else:
        main()
