"""The language-model run another step starts from (fine-tuning on a corpus, the IMDB
lesson's `lm_classifier`): found by run id, prefix or model URI, with its verified
`Generator` and its config."""

from workflows.causal_lm.generator import Generator
from workflows.causal_lm.presets import CATALOG, EXPERIMENT
from workflows.core import models, runs


def source_run(init_from):
    """The run of `init_from` (a run id, a prefix or a model URI)."""
    if ":/" in init_from:
        init_from = runs.source_run_id(init_from)
    return runs.find_run(EXPERIMENT, init_from)


def load_generator(run):
    """The `Generator` the run logged, its files checked against their digest."""
    with models.verified_model(run) as local:
        return Generator.load(local / "artifacts" / "generator")


def source_config(run):
    """The config the run was trained with."""
    return CATALOG.from_params(run.data.params)
