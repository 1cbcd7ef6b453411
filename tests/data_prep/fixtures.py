"""Small archives in the real formats, built by the tests."""

import io
import tarfile
import zipfile
from pathlib import Path

POSITIVE = ["A gripping, beautifully shot film.<br /><br />Loved it", "Great acting &amp; story",
            "Wonderful and moving", "Best movie this year", "Funny, warm, clever"]
NEGATIVE = ["Dull and far too long.<br />Skip it", "Awful script", "Terrible acting",
            "A boring mess", "Worst film I have seen"]


def write_imdb_folder(root, reviews_per_class=10, unlabelled=4):
    """An `aclImdb/` tree: train/test pos/neg reviews and train/unsup."""
    base = Path(root) / "aclImdb"
    for split in ("train", "test"):
        for label, texts in (("pos", POSITIVE), ("neg", NEGATIVE)):
            folder = base / split / label
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(reviews_per_class):
                (folder / f"{i}_{7 if label == 'pos' else 2}.txt").write_text(
                    f"{texts[i % len(texts)]} number {i} in {split}", encoding="utf-8")
    unsup = base / "train" / "unsup"
    unsup.mkdir(parents=True, exist_ok=True)
    for i in range(unlabelled):
        (unsup / f"{i}_0.txt").write_text(f"an unlabelled review {i}", encoding="utf-8")
    return base


def write_tar_gz(folder, archive):
    """Packs `folder` (its name kept as the top-level entry) into `archive`."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=Path(folder).name)
    return archive


def add_tar_member(archive, name, data=b"x", kind=tarfile.REGTYPE, linkname=""):
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, linkname, len(data)
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return archive


SPA_LINES = [
    "Go.\tVe.", "Go.\tVete.", "Go.\tVaya.", "Hi.\tHola.", "Run!\t¡Corre!", "Who?\t¿Quién?",
    "I love reading books.\tMe encanta leer libros.", "I love reading books.\tAmo leer libros.",
    "How are you?\t¿Cómo estás?", "How are you?\t¿Qué tal?", "Thank you.\tGracias.",
    "Good night.\tBuenas noches.", "I am tired.\tEstoy cansado.", "I am tired.\tEstoy cansada.",
    "It is raining.\tEstá lloviendo.", "Where is the station?\t¿Dónde está la estación?",
    "The cat sleeps.\tEl gato duerme.", "We are friends.\tSomos amigos.",
    "She reads a book.\tElla lee un libro.", "He is tall.\tÉl es alto.",
]


def write_spa_eng_zip(archive, lines=SPA_LINES):
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("spa-eng/spa.txt", "\n".join(lines) + "\n")
        zipped.writestr("spa-eng/_about.txt", "test fixture")
    return archive


NOUNS = {"cat": "gato", "dog": "perro", "book": "libro", "car": "coche", "tree": "árbol",
         "boy": "niño", "horse": "caballo", "bread": "pan"}
ADJECTIVES = {"big": "grande", "small": "pequeño", "red": "rojo", "new": "nuevo", "old": "viejo",
              "black": "negro"}


def generated_spa_lines():
    """About 80 regular sentence pairs (with punctuation, `¿`, several references)."""
    lines = list(SPA_LINES)
    for noun, sustantivo in NOUNS.items():
        for adjective, adjetivo in ADJECTIVES.items():
            lines.append(f"The {noun} is {adjective}.\tEl {sustantivo} es {adjetivo}.")
        lines.append(f"Where is the {noun}?\t¿Dónde está el {sustantivo}?")
        lines.append(f"I see the {noun}.\tVeo el {sustantivo}.")
        lines.append(f"I see the {noun}.\tYo veo el {sustantivo}.")
    return lines


def write_tiny_encoder(folder, layers=2, width=16, max_length=160, words=None):
    """A BERT encoder with random weights in Hugging Face format (`config.json`,
    `model.safetensors`, `vocab.txt`), its vocabulary `words` (default: the words of the
    IMDB fixture)."""
    import json
    import re

    import numpy as np
    from safetensors.numpy import save_file

    words = sorted(set(words) if words is not None else {
        word for text in POSITIVE + NEGATIVE
        for word in re.findall(r"[a-z]+|[^\sa-z]", text.lower())})
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, "##s"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n", "utf-8")
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "vocab_size": len(vocabulary), "num_hidden_layers": layers,
        "num_attention_heads": 2, "hidden_size": width, "intermediate_size": 2 * width,
        "max_position_embeddings": max_length, "type_vocab_size": 2}))
    rng = np.random.default_rng(0)

    def dense(rows, columns):
        return {"weight": rng.normal(0, 0.02, (rows, columns)).astype("float32"),
                "bias": np.zeros(rows, "float32")}

    def norm():
        return {"weight": np.ones(width, "float32"), "bias": np.zeros(width, "float32")}

    tensors = {"embeddings.word_embeddings": {"weight": rng.normal(
                   0, 0.02, (len(vocabulary), width)).astype("float32")},
               "embeddings.position_embeddings": {"weight": rng.normal(
                   0, 0.02, (max_length, width)).astype("float32")},
               "embeddings.token_type_embeddings": {"weight": np.zeros((2, width), "float32")},
               "embeddings.LayerNorm": norm(), "pooler.dense": dense(width, width)}
    for i in range(layers):
        prefix = f"encoder.layer.{i}."
        tensors.update({prefix + name: dense(width, width) for name in (
            "attention.self.query", "attention.self.key", "attention.self.value",
            "attention.output.dense")})
        tensors.update({prefix + "attention.output.LayerNorm": norm(),
                        prefix + "intermediate.dense": dense(2 * width, width),
                        prefix + "output.dense": dense(width, 2 * width),
                        prefix + "output.LayerNorm": norm()})
    save_file({f"{name}.{kind}": value for name, parts in tensors.items()
               for kind, value in parts.items()}, str(folder / "model.safetensors"))
    return folder


def write_tiny_hub_preset(folder, architecture="bert", words=(), letters=False):
    """A keras-hub text classifier preset with random weights (a few thousand), saved
    with keras-hub's own `save_to_preset`, as a user's preset folder would be:
    `architecture` bert (WordPiece) or roberta (byte-level BPE); `words` join the
    vocabulary (with `letters`, bert's also holds a-z and ##a-##z: any other lowercase
    word is its letters)."""
    import keras_hub

    words = sorted({*words, "good", "bad", "film"})
    size = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                max_sequence_length=64)
    if architecture == "bert":
        alphabet = "abcdefghijklmnopqrstuvwxyz" if letters else ""
        vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words,
                      *(letter for letter in alphabet if letter not in words),
                      *(f"##{letter}" for letter in alphabet)]
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, 32)
        backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), **size)
        task = keras_hub.models.BertTextClassifier(backbone, 2, preprocessor=preprocessor)
    else:
        vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
        for letter in "abcdefghijklmnopqrstuvwxyz":  # byte-level: a word is its letters
            vocabulary.setdefault(letter, len(vocabulary))
            vocabulary.setdefault("Ġ" + letter, len(vocabulary))
        vocabulary.setdefault("oo", len(vocabulary))
        tokenizer = keras_hub.models.RobertaTokenizer(vocabulary=vocabulary, merges=["o o"])
        preprocessor = keras_hub.models.RobertaTextClassifierPreprocessor(tokenizer, 32)
        backbone = keras_hub.models.RobertaBackbone(vocabulary_size=len(vocabulary), **size)
        task = keras_hub.models.RobertaTextClassifier(backbone, 2, preprocessor=preprocessor)
    task.save_to_preset(str(folder))
    return Path(folder)


def write_tiny_causal_lm_preset(folder, architecture="gpt2", texts=()):
    """A keras-hub causal LM preset with random weights (a few thousand), saved with
    keras-hub's own `save_to_preset`: `architecture` gpt2 (byte-level BPE, learned
    positions) or llama (SentencePiece words learned on `texts`, rotary positions)."""
    import io

    import keras_hub

    size = dict(num_layers=1, hidden_dim=16, intermediate_dim=32)
    if architecture == "gpt2":
        vocabulary = {"<|endoftext|>": 0, "Ġ": 1}
        for letter in "abcdefghijklmnopqrstuvwxyz":  # byte-level: a word is its letters
            vocabulary.setdefault(letter, len(vocabulary))
            vocabulary.setdefault("Ġ" + letter, len(vocabulary))
        merges = ["t h", "Ġ t", "Ġt h"]
        for merge in merges:
            vocabulary.setdefault(merge.replace(" ", ""), len(vocabulary))
        tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
        preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, 32)
        backbone = keras_hub.models.GPT2Backbone(vocabulary_size=len(vocabulary), num_heads=2,
                                                 max_sequence_length=64, **size)
        task = keras_hub.models.GPT2CausalLM(backbone, preprocessor)
    else:
        import sentencepiece

        proto = io.BytesIO()
        words = {word for text in texts for word in text.split()}
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(list(texts)), model_writer=proto, model_type="word",
            vocab_size=len(words) + 3, minloglevel=2)
        tokenizer = keras_hub.models.LlamaTokenizer(proto=proto.getvalue())
        preprocessor = keras_hub.models.LlamaCausalLMPreprocessor(tokenizer, 32)
        backbone = keras_hub.models.LlamaBackbone(
            vocabulary_size=tokenizer.vocabulary_size(), num_query_heads=2,
            num_key_value_heads=1, **size)
        task = keras_hub.models.LlamaCausalLM(backbone, preprocessor)
    task.save_to_preset(str(folder))
    return Path(folder)
