"""English-Spanish sentence pairs (Tatoeba via manythings.org/anki): parse, split, tokenize.

The split is grouped by English sentence: all translations of one English sentence
land in the same split, so no test sentence was seen in training, and the test set
keeps every Spanish reference of each sentence for multi-reference BLEU. Two
tokenizations are saved: the tutorial's word-level vocabularies and keras-hub
WordPiece subword vocabularies, both learned on the train split only.

    python -m data_prep.spa_eng --spa-eng-path ../shared/data/spa-eng.zip
"""

import data_prep.quiet_start  # noqa: F401  first: hides TensorFlow's start-up noise

# isort: split

import argparse
import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import keras
import numpy as np

from data_prep import cache
from data_prep.runtime import run_main
from data_prep.sources import DatasetSource, add_location_arguments, resolve
from data_prep.standardize import standardize_spanish
from data_prep.subwords import SPECIAL_TOKENS, learn_wordpiece

SPA_ENG = DatasetSource(
    name="spa-eng",
    archive_name="spa-eng.zip",
    url="http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
    sha256="f80e581ae291aa34dd3aba7bd98b5e9505234da4318e2f3295df70a1520c7f61",
    marker="spa-eng/spa.txt",
    env_var="NLPKIT_SPA_ENG_PATH",
    flag="--spa-eng-path",
)
START, END = "[start]", "[end]"
SUBWORD_SPECIAL_TOKENS = SPECIAL_TOKENS


@dataclass(frozen=True)
class SpaEngSettings:
    """Everything that changes the prepared data (and so its cache key)."""

    max_tokens: int = 15000
    sequence_length: int = 20
    fractions: tuple = (0.70, 0.15, 0.15)
    seed: int = 1337
    subword_vocabulary_size: int = 8000


@dataclass(frozen=True)
class Malformed:
    line_number: int
    line: str
    reason: str


def parse_pairs(text):
    """Parses `English<TAB>Spanish[<TAB>attribution]` lines -> (pairs, malformed).

    Surrounding whitespace is stripped and inner runs of spaces collapsed. Lines with
    no tab, an empty side, or (when `text` is bytes) bytes that are not UTF-8 are
    reported (1-based line numbers), not fatal.
    """
    pairs, malformed = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                malformed.append(Malformed(number, line.decode("utf-8", "replace"),
                                           f"not valid UTF-8 (byte {error.start + 1})"))
                continue
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            malformed.append(Malformed(number, line, "no tab between English and Spanish"))
            continue
        english, spanish = (" ".join(field.split()) for field in fields[:2])
        if not english or not spanish:
            malformed.append(Malformed(number, line, "empty English or Spanish side"))
            continue
        pairs.append((english, spanish))
    return pairs, malformed


def grouping_key(english):
    """Sentences that differ only in case or spacing count as the same sentence."""
    return " ".join(english.lower().split())


def split_by_source_sentence(pairs, fractions=(0.70, 0.15, 0.15), seed=1337):
    """Seeded split into train/val/test with each English sentence in one split only.

    Sentences (with all their translations) are shuffled and dealt out until each
    split holds its fraction of the pairs.
    """
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"`fractions` must be three non-negative numbers summing to 1, "
                         f"got {fractions}.")
    groups = defaultdict(list)
    for pair in pairs:
        groups[grouping_key(pair[0])].append(pair)
    keys = sorted(groups)
    order = np.random.default_rng(seed).permutation(len(keys))
    bounds = np.cumsum(fractions)[:2] * len(pairs)
    splits, count = {"train": [], "val": [], "test": []}, 0
    for index in order:
        group = groups[keys[index]]
        name = "train" if count < bounds[0] else "val" if count < bounds[1] else "test"
        splits[name].extend(group)
        count += len(group)
    return splits


def references_by_source(pairs):
    """`{English: [all Spanish translations]}` in first-seen order."""
    references = defaultdict(list)
    for english, spanish in pairs:
        references[english].append(spanish)
    return dict(references)


def make_vectorizers(settings, source_vocabulary=None, target_vocabulary=None):
    """The tutorial's word-level `TextVectorization` pair.

    English: lowercase, punctuation stripped, `sequence_length` tokens. Spanish: the
    same plus `¿`/`¡`, keeping the `[start]`/`[end]` markers, `sequence_length + 1`
    tokens (the decoder input and the labels are this shifted by one).
    """
    source = keras.layers.TextVectorization(
        max_tokens=settings.max_tokens, output_mode="int",
        output_sequence_length=settings.sequence_length, vocabulary=source_vocabulary,
    )
    target = keras.layers.TextVectorization(
        max_tokens=settings.max_tokens, output_mode="int",
        output_sequence_length=settings.sequence_length + 1,
        standardize=standardize_spanish, vocabulary=target_vocabulary,
    )
    return source, target


def mark_target(spanish):
    return f"{START} {spanish} {END}"


@dataclass
class PreparedSpaEng:
    directory: Path
    settings: SpaEngSettings
    summary: dict

    def pairs(self, split):
        return [tuple(pair) for pair in json.loads((self.directory / f"{split}.json").read_text())]

    def vocabulary(self, side):
        return (self.directory / f"{side}_vocabulary.txt").read_text(encoding="utf-8").split("\n")

    def wordpiece_vocabulary(self, side):
        return (self.directory / f"{side}_wordpiece.txt").read_text(encoding="utf-8").split("\n")


def prepare(path=None, settings=SpaEngSettings(), root=None, verbose=True):
    """Prepares (or reuses) the pairs for `settings`; returns `PreparedSpaEng`."""
    key_settings = {"dataset": "spa-eng", **asdict(settings)}
    directory = cache.prepared_dir("spa-eng", key_settings, root)
    if not cache.is_complete(directory):
        folder = resolve(SPA_ENG, path, root)
        cache.write_atomically(
            directory, key_settings,
            lambda tmp: _write_prepared(folder / SPA_ENG.marker, settings, tmp, verbose),
        )
    summary = json.loads((directory / "summary.json").read_text())
    return PreparedSpaEng(directory, settings, summary)


def _write_prepared(spa_txt, settings, tmp, verbose):
    started = time.perf_counter()
    pairs, malformed = parse_pairs(spa_txt.read_bytes())
    for bad in malformed[:10]:
        print(f"{spa_txt}:{bad.line_number}: skipped ({bad.reason}): {bad.line[:80]!r}")
    splits = split_by_source_sentence(pairs, settings.fractions, settings.seed)
    for name, split_pairs in splits.items():
        (tmp / f"{name}.json").write_text(json.dumps(split_pairs, ensure_ascii=False))
    if verbose:
        print("Adapting the word vocabularies on the train split")
    source, target = make_vectorizers(settings)
    source.adapt([english for english, _ in splits["train"]], batch_size=1024)
    target.adapt([mark_target(spanish) for _, spanish in splits["train"]], batch_size=1024)
    for side, vectorizer in (("source", source), ("target", target)):
        (tmp / f"{side}_vocabulary.txt").write_text(
            "\n".join(vectorizer.get_vocabulary()), encoding="utf-8")
    if verbose:
        print(f"Learning WordPiece vocabularies ({settings.subword_vocabulary_size} tokens)")
    for side, index in (("source", 0), ("target", 1)):
        vocabulary = learn_wordpiece([pair[index] for pair in splits["train"]],
                                     settings.subword_vocabulary_size)
        (tmp / f"{side}_wordpiece.txt").write_text("\n".join(vocabulary), encoding="utf-8")
    summary = {
        "pairs": len(pairs),
        "malformed_lines": len(malformed),
        "counts": {name: len(split) for name, split in splits.items()},
        "english_sentences": {name: len({grouping_key(e) for e, _ in split})
                              for name, split in splits.items()},
        "vocabulary_sizes": {"source": source.vocabulary_size(),
                             "target": target.vocabulary_size()},
        "wordpiece_vocabulary_sizes": {
            side: len((tmp / f"{side}_wordpiece.txt").read_text(encoding="utf-8").split("\n"))
            for side in ("source", "target")},
        "prepare_seconds": round(time.perf_counter() - started, 1),
    }
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.spa_eng",
        description="Prepare the English-Spanish pairs and print a summary.",
    )
    add_location_arguments(parser, SPA_ENG)
    defaults = SpaEngSettings()
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    parser.add_argument("--sequence-length", type=int, default=defaults.sequence_length)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--subword-vocabulary-size", type=int,
                        default=defaults.subword_vocabulary_size,
                        help="size of each WordPiece vocabulary (learned on the train split)")
    args = parser.parse_args(argv)
    settings = SpaEngSettings(args.max_tokens, args.sequence_length, defaults.fractions, args.seed,
                              args.subword_vocabulary_size)
    started = time.perf_counter()
    prepared = prepare(args.spa_eng_path, settings, args.work_dir)
    cache.print_summary(prepared, started)


if __name__ == "__main__":
    run_main(main)
