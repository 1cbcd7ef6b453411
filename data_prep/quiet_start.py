"""Imported first by an entry point, before anything imports TensorFlow: the heavy
libraries load on first use (`runtime.defer_heavy_imports`), so `--help` and a mistyped
flag answer at once, and TensorFlow's start-up noise stays hidden."""

from data_prep.runtime import defer_heavy_imports

defer_heavy_imports()
