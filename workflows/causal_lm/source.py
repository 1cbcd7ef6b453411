"""The language model another step starts from (fine-tuning on a corpus, the IMDB
lesson's `lm_classifier`): a run found by run id, prefix or model URI, with its verified
generator and its config, or a keras-hub preset (`hub.py`)."""

from workflows.causal_lm.generator import load_generator as load_generator_folder
from workflows.causal_lm.presets import CATALOG, EXPERIMENT
from workflows.core import models, runs
from workflows.core.config import ConfigError


def source_run(init_from):
    """The run of `init_from` (a run id, a prefix or a model URI)."""
    if ":/" in init_from:
        init_from = runs.source_run_id(init_from)
    return runs.find_run(EXPERIMENT, init_from)


def load_generator(run):
    """The `Generator` the run logged, its files checked against their digest."""
    with models.verified_model(run) as local:
        return load_generator_folder(local / "artifacts" / "generator")


def source_config(run):
    """The config the run was trained with."""
    return CATALOG.from_params(run.data.params)


def load_source(config):
    """The generator `config.init_from` names: a keras-hub preset's (with LoRA adapters
    if `config.lora_rank`), or a run's."""
    from workflows.causal_lm import hub
    from workflows.core import precision

    if hub.is_hub_source(config.init_from):
        precision.use_precision(config.dtype_policy)
        generator = hub.HubGenerator(hub.load_task(config.init_from), config.lora_rank)
        if generator.max_length and config.sequence_length > generator.max_length:
            raise ConfigError(f"sequence_length={config.sequence_length} is longer than "
                              f"{config.init_from} reads ({generator.max_length} tokens); "
                              f"set sequence_length={generator.max_length} or less.")
        return generator
    return load_generator(source_run(config.init_from))
