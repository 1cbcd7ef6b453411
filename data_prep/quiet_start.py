"""Imported first by an entry point, before anything imports TensorFlow: hides its
start-up noise (`runtime.quiet_tensorflow`), so a newcomer's terminal stays readable."""

from data_prep.runtime import quiet_tensorflow

quiet_tensorflow()
