"""A fifth lesson in a few dozen lines, with no change to `workflows/core/`: a toy text
classifier (does a sentence hold more good words than bad ones?) through the same
contract, lifecycle and command line as the kit's lessons (test_lesson_contract.py)."""

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from workflows.core.cli import LessonCLI
from workflows.core.config import Catalog, TrainingOptions, option, training_option
from workflows.core.lesson import Built, Lesson, ModelExport, RunDataset, dataset_digest

GOOD, BAD = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "dull"]
FILLER = ["the", "a", "film", "plot", "cast", "story", "was", "and", "very", "so"]


@dataclass(frozen=True)
class ToyConfig(TrainingOptions):
    model: str = "averaged_embeddings"
    embed_dim: int = option(8, at_least=1, help="size of each word's vector")
    sentences: int = option(160, at_least=8, help="training sentences to generate")
    epochs: int = training_option("epochs", 3)  # a shared option, this lesson's default


@dataclass
class ToyData:
    texts: dict  # split -> sentences
    labels: dict  # split -> 0/1
    vocabulary: list

    @property
    def fingerprint(self):
        return hashlib.sha256(json.dumps(self.texts, sort_keys=True).encode()).hexdigest()[:12]

    def batches(self, split, epoch=None):
        import numpy as np

        from workflows.core.batches import token_batches

        index = {word: row for row, word in enumerate(self.vocabulary)}
        ids = np.array([[index[w] for w in text.split()] for text in self.texts[split]])
        return token_batches(ids, np.array(self.labels[split], "float32"), (6,), 8,
                             seed=epoch, bucketing=False)


def sentence(rng):
    words = rng.choices(GOOD + BAD, k=3) + rng.choices(FILLER, k=3)
    rng.shuffle(words)
    return " ".join(words), int(sum(w in GOOD for w in words) >= 2)


class ToyLesson(Lesson):
    experiment, catalog = "toy_lesson", Catalog({"averaged_embeddings": {"default": ToyConfig()}})
    compare_columns, sort_by = ("run_id", "metrics.best_val_accuracy"), "metrics.best_val_accuracy"

    def load_data(self, config, place):
        rng = random.Random(config.seed)
        made = {split: [sentence(rng) for _ in range(config.sentences // (4 if split == "val"
                                                                          else 1))]
                for split in ("train", "val")}
        return ToyData({s: [t for t, _ in rows] for s, rows in made.items()},
                       {s: [y for _, y in rows] for s, rows in made.items()}, GOOD + BAD + FILLER)

    def datasets(self, config, data, place):
        return [RunDataset(f"toy {split}", dataset_digest(data.fingerprint, split),
                           __file__, context, len(data.texts[split]))
                for split, context in (("train", "training"), ("val", "validation"))]

    def build(self, config, data, place):
        import keras

        model = keras.Sequential([keras.Input((6,), dtype="int32"),
                                  keras.layers.Embedding(len(data.vocabulary), config.embed_dim),
                                  keras.layers.GlobalAveragePooling1D(),
                                  keras.layers.Dense(1, activation="sigmoid")])
        model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
        return Built(model, params={"parameters": model.count_params()})

    def fit(self, training, config, data, built):
        training.fit(lambda epoch: data.batches("train", epoch), data.batches("val"),
                     len(data.texts["train"]))

    def export(self, config, data, built):
        def save(folder):
            folder.mkdir()
            built.model.save(folder / "model.keras")
            (folder / "vocabulary.json").write_text(json.dumps(data.vocabulary))

        return ModelExport("classifier", save, Path(__file__).with_name("toy_pyfunc.py"),
                           ["a good film"])


LESSON = ToyLesson()
CLI = LessonCLI(LESSON, "tests.workflows.toy_lesson", __doc__.split("\n")[0], source=None)
CLI.step("train", "train the toy classifier", CLI.train, data=True, train="one")
CLI.shared_steps()
main = CLI.main
