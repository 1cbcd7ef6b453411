"""English-Spanish sentence pairs (Tatoeba via manythings.org/anki), or a user's parallel
corpus of any two languages (`parallel.py`): parse, split, tokenize.

The split keeps every sentence, of either language, in one split only: pairs are
grouped by connected component of the pair graph (sentences linked by being
translations of each other), so no test sentence, English or Spanish, was seen in
training in either direction, and the test set keeps every reference of each source
sentence for multi-reference BLEU. Two tokenizations are saved for each direction
(`en-es`, `es-en`; a user's corpus: its two languages' both ways): the tutorial's
word-level vocabularies and keras-hub WordPiece
subword vocabularies (one per language), all learned on the train split only
(`pair_tokens.py` turns the pairs into token ids).

    python -m data_prep.spa_eng --spa-eng-path ../shared/data/spa-eng.zip
    python -m data_prep.spa_eng --pairs fra-eng.zip --languages en-fr
"""

import argparse
import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_prep import cache, parallel
from data_prep.sources import (
    DatasetSource,
    DataSourceError,
    add_location_arguments,
    prepared_entry,
    resolve,
)
from data_prep.text import (
    SPECIAL_TOKENS,
    TEXT_NORMALIZATION,
    learn_wordpiece,
    register_standardizations,
    standardize_sentence,
    standardize_spanish,
    text_lines,
)
from process.commands import import_backend, run_main

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
LANGUAGES = ("en", "es")  # the tutorial's columns: English, then Spanish
DIRECTIONS = ("en-es", "es-en")
LANGUAGE_NAMES = parallel.LANGUAGE_NAMES


def directions(pair_languages=LANGUAGES):
    first, second = pair_languages
    return (f"{first}-{second}", f"{second}-{first}")


def languages(direction):
    """`"es-en"` -> `("es", "en")` (source, target); a `ValueError` for other names."""
    parts = tuple(str(direction).split("-"))
    if len(parts) != 2 or not all(parallel.LANGUAGE_CODE.fullmatch(part) for part in parts):
        raise ValueError(f"direction must be two language codes joined by a dash (en-es), "
                         f"got {direction!r}")
    return parts


def orient(pairs, direction, pair_languages=LANGUAGES):
    """(first, second) pairs (English, Spanish by default) as (source, target) pairs for
    `direction`."""
    forward, backward = directions(pair_languages)
    if direction not in (forward, backward):
        raise ValueError(f"direction {direction!r} is not {forward} or {backward}")
    return [tuple(pair) for pair in pairs] if direction == forward else \
        [(second, first) for first, second in pairs]


@dataclass(frozen=True)
class SpaEngSettings:
    """Everything that changes the prepared data (and so its cache key)."""

    max_tokens: int = 15000
    sequence_length: int = 20
    fractions: tuple = (0.70, 0.15, 0.15)
    seed: int = 1337
    subword_vocabulary_size: int = 8000
    # how the split keeps sentences apart: connected components of the pair graph
    grouping: str = "pair_components"


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
    for number, line in enumerate(text_lines(text), start=1):
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


def grouping_key(sentence):
    """Sentences that differ only in case or spacing count as the same sentence."""
    return " ".join(sentence.lower().split())


def pair_components(pairs):
    """Components of the graph whose nodes are sentences (English and Spanish, by
    `grouping_key`) and whose edges are the pairs: one list of pairs per component."""
    parent = {}

    def root(node):
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for first, second in pairs:
        a, b = root(("en", grouping_key(first))), root(("es", grouping_key(second)))
        if a != b:
            parent[max(a, b)] = min(a, b)  # the smaller node names the component
    components = defaultdict(list)
    for pair in pairs:  # (the nodes' names: the first and the second column)
        components[root(("en", grouping_key(pair[0])))].append(pair)
    return [components[name] for name in sorted(components)]


def split_by_component(pairs, fractions=(0.70, 0.15, 0.15), seed=1337):
    """Seeded split into train/val/test; no sentence of either language is in two splits.

    Components of the pair graph (`pair_components`) are shuffled and dealt out until
    each split holds its fraction of the pairs.
    """
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"`fractions` must be three non-negative numbers summing to 1, "
                         f"got {fractions}.")
    components = pair_components(pairs)
    order = np.random.default_rng(seed).permutation(len(components))
    bounds = np.cumsum(fractions)[:2] * len(pairs)
    splits, count = {"train": [], "val": [], "test": []}, 0
    for index in order:
        component = components[index]
        name = "train" if count < bounds[0] else "val" if count < bounds[1] else "test"
        splits[name].extend(component)
        count += len(component)
    return splits


def component_sizes(pairs):
    """`{pairs in a component: how many components}`, smallest first."""
    return dict(sorted(Counter(len(c) for c in pair_components(pairs)).items()))


def references_by_source(pairs):
    """`{source: [all its translations]}` in first-seen order."""
    references = defaultdict(list)
    for source, target in pairs:
        references[source].append(target)
    return dict(references)


def make_vectorizers(settings, source_vocabulary=None, target_vocabulary=None,
                     direction="en-es"):
    """The tutorial's word-level `TextVectorization` pair for `direction`.

    Source: lowercase, punctuation stripped (Spanish: `¿`/`¡` too; another language:
    every Unicode punctuation mark, its letters and accents kept), `sequence_length`
    tokens. Target: the same, keeping the `[start]`/`[end]` markers, `sequence_length
    + 1` tokens (the decoder input and the labels are this shifted by one).
    """
    import keras

    register_standardizations()

    source_language, target_language = languages(direction)
    tutorial = {"en": "lower_and_strip_punctuation", "es": standardize_spanish}
    source = keras.layers.TextVectorization(
        max_tokens=settings.max_tokens, output_mode="int",
        output_sequence_length=settings.sequence_length, vocabulary=source_vocabulary,
        standardize=tutorial.get(source_language, standardize_sentence),
    )
    target = keras.layers.TextVectorization(
        max_tokens=settings.max_tokens, output_mode="int",
        output_sequence_length=settings.sequence_length + 1,
        standardize=standardize_spanish if target_language in tutorial
        else standardize_sentence, vocabulary=target_vocabulary,
    )
    return source, target


def mark_target(sentence):
    return f"{START} {sentence} {END}"


@dataclass
class PreparedSpaEng:
    directory: Path
    settings: SpaEngSettings
    summary: dict

    @property
    def languages(self):
        """The codes of the pairs' two columns."""
        return tuple(self.summary.get("languages", LANGUAGES))

    @property
    def name(self):
        """What the runs call the dataset: `spa-eng`, or the user's corpus."""
        return self.summary.get("corpus", "spa-eng")

    def pairs(self, split, direction=None):
        """The split's pairs as (source, target) for `direction` (default: as stored)."""
        return orient(json.loads((self.directory / f"{split}.json").read_text()),
                      direction or directions(self.languages)[0], self.languages)

    def check_direction(self, direction):
        """Refuses, in one line, a direction of other languages than the pairs'."""
        if direction not in directions(self.languages):
            raise parallel.PairsError(
                f"--direction {direction} is not a direction of the {self.name} pairs: give "
                f"--direction {' or '.join(directions(self.languages))}.")

    def vocabulary(self, side, direction="en-es"):
        """The word vocabulary of `side` ("source" or "target") for `direction`."""
        return self._read(f"word_{direction}_{side}.txt")

    def wordpiece_vocabulary(self, side, direction="en-es"):
        """The WordPiece vocabulary of `side`'s language (one per language)."""
        return self._read(f"wordpiece_{languages(direction)[side == 'target']}.txt")

    def _read(self, name):
        return (self.directory / name).read_text(encoding="utf-8").split("\n")


def prepare(path=None, settings=SpaEngSettings(), root=None, verbose=True, corpus=None):
    """Prepares (or reuses) the pairs for `settings`: spa-eng, or the user's `corpus` (a
    `parallel.ParallelCorpus`, keyed by its files' contents); returns `PreparedSpaEng`."""
    if corpus is not None:
        return _prepare_corpus(corpus, settings, root, verbose)
    directory, key_settings = prepared_entry(
        SPA_ENG, "spa-eng", {"dataset": "spa-eng", **asdict(settings)}, path, root)
    if not cache.is_intact(directory):
        folder = resolve(SPA_ENG, path, root, key_settings.get("source"))
        cache.write_atomically(
            directory, key_settings,
            lambda tmp: _write_prepared(folder / SPA_ENG.marker, settings, tmp, verbose),
        )
    summary = json.loads((directory / "summary.json").read_text())
    return PreparedSpaEng(directory, settings, summary)


def _prepare_corpus(corpus, settings, root, verbose):
    key_settings = {"dataset": "pairs", "languages": list(corpus.languages),
                    "files": corpus.digest(), "text": TEXT_NORMALIZATION, **asdict(settings)}
    directory = cache.prepared_dir("pairs", key_settings, root)
    if not cache.is_intact(directory):
        def write(tmp):
            pairs = corpus.read()
            splits = _split(pairs, [], settings, f"--pairs {corpus.files[0]}",
                            "a larger corpus")
            _write_splits(tmp, pairs, splits, [], settings, corpus.languages, verbose,
                          corpus=corpus.name)
        cache.write_atomically(directory, key_settings, write)
    summary = json.loads((directory / "summary.json").read_text())
    return PreparedSpaEng(directory, settings, summary)


def _split(pairs, malformed, settings, where, remedy):
    splits = split_by_component(pairs, settings.fractions, settings.seed)
    empty = [name for name, split_pairs in splits.items() if not split_pairs]
    if empty:
        raise DataSourceError(
            f"{where} holds {len(pairs)} usable pairs ({len(malformed)} lines skipped): too "
            f"few to give the {', '.join(empty)} split any ({remedy}, thousands of pairs).")
    return splits


def _write_prepared(spa_txt, settings, tmp, verbose):
    pairs, malformed = parse_pairs(spa_txt.read_bytes())
    for bad in malformed[:10]:
        print(f"{spa_txt}:{bad.line_number}: skipped ({bad.reason}): {bad.line[:80]!r}")
    splits = _split(pairs, malformed, settings, str(spa_txt), f"point {SPA_ENG.flag} at the "
                    "whole spa-eng.zip, or a file of ENGLISH<TAB>SPANISH lines")
    _write_splits(tmp, pairs, splits, malformed, settings, LANGUAGES, verbose)


def _write_splits(tmp, pairs, splits, malformed, settings, pair_languages, verbose,
                  corpus=None):
    started = time.perf_counter()
    for name, split_pairs in splits.items():
        (tmp / f"{name}.json").write_text(json.dumps(split_pairs, ensure_ascii=False))
    if verbose:
        print("Adapting the word vocabularies on the train split")
    vocabulary_sizes = {}
    for direction in directions(pair_languages):
        source, target = make_vectorizers(settings, direction=direction)
        train = orient(splits["train"], direction, pair_languages)
        source.adapt([s for s, _ in train], batch_size=1024)
        target.adapt([mark_target(t) for _, t in train], batch_size=1024)
        for side, vectorizer in (("source", source), ("target", target)):
            (tmp / f"word_{direction}_{side}.txt").write_text(
                "\n".join(vectorizer.get_vocabulary()), encoding="utf-8")
        vocabulary_sizes[direction] = {"source": source.vocabulary_size(),
                                       "target": target.vocabulary_size()}
    if verbose:
        print(f"Learning WordPiece vocabularies ({settings.subword_vocabulary_size} tokens)")
    wordpiece_sizes = {}
    for index, language in enumerate(pair_languages):
        vocabulary = learn_wordpiece([pair[index] for pair in splits["train"]],
                                     settings.subword_vocabulary_size)
        (tmp / f"wordpiece_{language}.txt").write_text("\n".join(vocabulary), encoding="utf-8")
        wordpiece_sizes[language] = len(vocabulary)
    sizes = component_sizes(pairs)
    summary = {
        "pairs": len(pairs),
        "malformed_lines": len(malformed),
        "counts": {name: len(split) for name, split in splits.items()},
        "sentences": {name: {language: len({grouping_key(pair[index]) for pair in split})
                             for index, language in enumerate(pair_languages)}
                      for name, split in splits.items()},
        "pair_components": {"count": sum(sizes.values()), "largest": max(sizes),
                            "pairs_per_component": sizes},
        "vocabulary_sizes": vocabulary_sizes,
        "wordpiece_vocabulary_sizes": wordpiece_sizes,
        "prepare_seconds": round(time.perf_counter() - started, 1),
        **({"corpus": corpus, "languages": list(pair_languages)} if corpus else {}),
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
    parallel.add_pairs_arguments(parser)
    args = parser.parse_args(argv)
    corpus = parallel.ParallelCorpus.of(args.pairs, args.languages)
    import_backend()
    settings = SpaEngSettings(args.max_tokens, args.sequence_length, defaults.fractions, args.seed,
                              args.subword_vocabulary_size)
    started = time.perf_counter()
    prepared = prepare(args.spa_eng_path, settings, args.work_dir, corpus=corpus)
    cache.print_summary(prepared, started)


if __name__ == "__main__":
    run_main(main)
