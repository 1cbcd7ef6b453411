"""A pretrained causal language model from the Keras ecosystem, fine-tuned by the lesson.

`--init-from` takes any folder that keras-hub's `CausalLM.from_preset` reads (a preset
keras-hub wrote with `save_to_preset`, or a Hugging Face folder it converts: GPT-2,
Gemma, Llama, Mistral, Qwen, ...) or, online, a keras-hub preset name
(`keras_hub.models.CausalLM.presets`). The model keeps its own tokenizer: the corpus is
tokenized with it (`HubTokens`), each document followed by its end token.

`HubGenerator` is the lesson's generator for such a model: `model` (token ids in, logits
out) is what `train` fits, on the backbone the task holds; `generate` goes through the
task's own `generate`, with the same keras-hub samplers as the kit's GPT; `save` writes
a keras-hub preset folder. With `lora_rank`, only low-rank adapters of the backbone's
attention train (`backbone.enable_lora`); the saved preset holds the merged weights
(Keras folds each adapter into its kernel when it saves), so it loads, serves and
fine-tunes again as a plain preset. keras-hub's tokenizers are TensorFlow layers: this
path needs TensorFlow where it trains and where it serves, whatever the backend.
"""

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np

from workflows.core.config import ConfigError

KIND_FILE = "kit_generator.json"  # marks a saved folder as this kind, beside the preset's
LENGTH_STEP = 32  # generation arrays are a multiple of this long: few shapes to compile


def is_hub_source(init_from):
    """Whether `init_from` names a keras-hub causal LM: a folder holding a preset
    (`metadata.json`) or a Hugging Face checkpoint (`config.json`), or a preset name."""
    path = Path(init_from).expanduser()
    if path.is_dir():
        return (path / "metadata.json").is_file() or (path / "config.json").is_file()
    if "/" in init_from or ":" in init_from or all(c in "0123456789abcdef" for c in init_from):
        return False  # a model URI, a missing folder, a run id or its prefix
    try:
        import keras_hub
    except ImportError:  # (a machine without keras-hub reads runs only)
        return False
    return init_from in keras_hub.models.CausalLM.presets


def resolved(init_from):
    """The source as the run records it: a folder's absolute path, or the preset name."""
    path = Path(init_from).expanduser()
    return str(path.resolve()) if path.is_dir() else init_from


def load_task(source):
    """The keras-hub `CausalLM` of `source`, or one line saying why it cannot be read."""
    import keras_hub

    try:
        return keras_hub.models.CausalLM.from_preset(str(source))
    except (ValueError, KeyError, OSError, TypeError) as error:
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise ConfigError(f"keras-hub cannot read {source} as a causal language model "
                          f"({reason}); give a keras-hub preset folder, a Hugging Face "
                          "folder keras-hub converts, or a preset name (online).") from error


class HubTokens:
    """The task's tokenizer as `data_prep.corpus.prepare` reads it (`tokens=`)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end_id = int(tokenizer.end_token_id)
        start = getattr(tokenizer, "start_token_id", None)
        # a document starts as the preprocessor starts a prompt (Llama's `<s>`; GPT-2's
        # start is its end token, which the document before ends with)
        self.start = [] if start is None or int(start) == self.end_id else [int(start)]
        self.size = int(tokenizer.vocabulary_size())

    @property
    def key(self):
        """A digest of the tokenizer's config and its assets (vocabulary, merges, model)."""
        digest = hashlib.sha256(json.dumps(self.tokenizer.get_config(), sort_keys=True,
                                           default=str).encode())
        with tempfile.TemporaryDirectory() as folder:
            self.tokenizer.save_assets(folder)
            for path in sorted(Path(folder).rglob("*")):
                if path.is_file():
                    digest.update(path.name.encode() + path.read_bytes())
        return digest.hexdigest()[:16]

    def text(self, ids):
        """The text of token `ids`, as the tokenizer writes it back."""
        if not ids:
            return ""
        text = self.tokenizer.detokenize([ids])[0]
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)

    def ids(self, documents):
        import keras

        rows = self.tokenizer(list(documents))
        if hasattr(rows, "to_list"):  # a ragged tensor
            return rows.to_list()
        if isinstance(rows, list):
            return [np.asarray(row).tolist() for row in rows]
        return keras.ops.convert_to_numpy(rows).tolist()

    def document_ids(self, documents):
        """Each document's ids as the corpus streams it: after the start token, if any."""
        return [self.start + row for row in self.ids(documents)]


def continuation(output, prompt, read):
    """`output` (prompt and continuation) after the prompt, as given or as the tokenizer
    `read` it (its words only, normalized)."""
    for prefix in (prompt, read):
        if prefix and output.startswith(prefix):
            return output[len(prefix):].strip()
    return output.strip()


class HubGenerator:
    """A keras-hub causal LM with the kit generator's interface (`model`, `generate`,
    `save`, `training_loss`), its backbone's attention adapted by LoRA if `lora_rank`."""

    def __init__(self, task, lora_rank=0):
        import keras

        self.task, self.lora_rank = task, lora_rank
        if lora_rank:
            task.backbone.enable_lora(lora_rank)
        self.tokens = HubTokens(task.preprocessor.tokenizer)
        self.max_length = getattr(task.backbone, "max_sequence_length", None)
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        logits = task({"token_ids": token_ids,
                       "padding_mask": keras.ops.ones_like(token_ids, "bool")})
        self.model = keras.Model(token_ids, logits, name="hub_causal_lm")

    @property
    def vocabulary_size(self):
        return self.tokens.size

    @property
    def architecture(self):
        return type(self.task).__name__

    @staticmethod
    def training_loss():
        """Cross-entropy over the labels that weigh (padding has weight 0)."""
        import keras

        return keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight")

    def generate(self, prompts, sampling=None):
        """The continuation of each prompt (text after it), by the task's `generate`."""
        from workflows.causal_lm.sampling import Sampling

        sampling = (sampling or Sampling()).check()
        bad = [i for i, prompt in enumerate(prompts) if not isinstance(prompt, str)]
        if bad:
            raise TypeError(f"Prompts must be strings; items {bad[:10]} are not.")
        if not prompts:
            return []
        self.task.compile(sampler=sampling.make_sampler())
        longest = max(map(len, self.tokens.ids(prompts))) + 1  # + its start token
        length = -(-(longest + sampling.max_new_tokens) // LENGTH_STEP) * LENGTH_STEP
        if self.max_length:
            length = min(length, self.max_length)
        outputs = self.task.generate(list(prompts), max_length=length)
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        texts = [continuation(output, prompt, self.tokens.text(ids)) for prompt, output, ids
                 in zip(prompts, outputs, self.tokens.ids(prompts), strict=True)]
        # the array's rounded length may hold more: cut to max_new_tokens
        return [self.tokens.text(ids[:sampling.max_new_tokens]) if len(ids) > sampling.
                max_new_tokens else text for text, ids in zip(texts, self.tokens.ids(texts),
                                                              strict=True)]

    def save(self, folder):
        """A keras-hub preset folder (LoRA merged into the kernels) marked as this kind."""
        folder = Path(folder)
        self.task.save_to_preset(str(folder))
        (folder / KIND_FILE).write_text(json.dumps({"kind": "hub_causal_lm",
                                                    "architecture": self.architecture}))
        return folder

    @classmethod
    def load(cls, folder):
        return cls(load_task(folder))


def is_saved_hub_generator(folder):
    return (Path(folder) / KIND_FILE).is_file()
