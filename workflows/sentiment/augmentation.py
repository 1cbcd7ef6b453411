"""More train reviews for the IMDB models: paraphrases made by round-trip translation
through the kit's own logged translators (English -> Spanish -> English), or copies with
random word deletions and swaps (EDA, Wei & Zou 2019).

Only train reviews are augmented; validation and test stay as prepared. A paraphrase
keeps its review's label. The unit paraphrased is a slice of one or two sentences of
each review (`augment_unit=slices`: short text, like reviews written elsewhere, and a
tenth of the translation work) or the whole review. Each translated sentence is
remembered in a cache entry keyed by both translators (run and model digest) and the
decoding settings, so a later run, another model, or a larger `augment_fraction` reuses
every sentence already done; an interrupted augmentation resumes where it stopped.
"""

import hashlib
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data_prep import cache
from data_prep.text import clean_html, sentences_of, text_lines
from workflows.seq2seq.presets import EXPERIMENT as TRANSLATION

DIRECTIONS = {"translator": "en-es", "back_translator": "es-en"}
CHUNK = 512  # sentences translated (and remembered) at a time
MEMO_FILE = "paraphrases.jsonl"


@dataclass(frozen=True)
class Augmentation:
    """The extra train rows (after the prepared ones) and what made them."""

    texts: list
    labels: np.ndarray
    name: str  # `none`, `edit-<key>` or the cache entry of the paraphrases
    summary: dict


class AugmentedImdb:
    """A prepared IMDB whose train split ends with the augmented rows; everything else
    (validation, test, vocabulary, folder) is the prepared data's."""

    def __init__(self, prepared, augmentation):
        self.prepared, self.augmentation = prepared, augmentation

    def __getattr__(self, name):
        return getattr(self.prepared, name)

    def texts(self, split):
        texts = self.prepared.texts(split)
        return texts + self.augmentation.texts if split == "train" else texts

    def labels(self, split):
        labels = self.prepared.labels(split)
        return np.concatenate([labels, self.augmentation.labels]) if split == "train" \
            else labels

    def token_ids(self, split):
        ids = self.prepared.token_ids(split)
        if split != "train" or not self.augmentation.texts:
            return ids
        return np.concatenate([ids, self.prepared.python_vectorizer()(self.augmentation.texts)])


def augment(config, prepared, work_dir=None):
    """The `Augmentation` of `config` (its `augment`, `augment_unit`, `augment_copies`,
    `augment_fraction`, translators and seed) for the prepared train reviews."""
    texts, labels = prepared.texts("train"), prepared.labels("train")
    picked = units(texts, config.augment_unit, config.augment_copies,
                   config.augment_fraction, config.seed)
    settings = {"unit": config.augment_unit, "copies": config.augment_copies,
                "fraction": config.augment_fraction, "seed": config.seed}
    started = time.perf_counter()
    if config.augment == "edit":
        rng = random.Random(config.seed)
        made = [edited(text, rng) for _, _, text in picked]
        name, summary = f"edit-{cache.settings_key(settings)}", {}
    else:
        memo = ParaphraseMemo.for_translators(config.translator, config.back_translator,
                                              config.augment_copies, work_dir)
        made, summary = memo.paraphrase_units([text for _, _, text in picked])
        name = f"{memo.folder.name}-{cache.settings_key(settings)}"
    rows = [index for index, _, _ in picked]
    summary = {"augmentation": config.augment, "augmented_rows": len(made),
               "augment_seconds": time.perf_counter() - started, **summary}
    print(f"Augmentation {name}: {len(made):,} extra train rows "
          f"({summary['augment_seconds']:.1f} s)")
    return Augmentation(made, labels[rows].astype(labels.dtype), name, summary)


def units(texts, unit, copies, fraction, seed):
    """`(review index, copy, text)` to augment: `copies` per review of a seeded
    `fraction` of the reviews; a text is a slice of one or two sentences (`slices`) or
    the whole review without markup."""
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(texts)), round(fraction * len(texts))))
    picked = []
    for copy in range(copies):
        for index in chosen:
            sentences = split_sentences(texts[index])
            if unit == "slices":
                start = rng.randrange(len(sentences))
                sentences = sentences[start:start + rng.randint(1, 2)]
            picked.append((index, copy, " ".join(sentences)))
    return picked


def split_sentences(text):
    text = clean_html(text)
    return sentences_of(text) or [text]


def edited(text, rng, share=0.1):
    """`text` with each word deleted with probability `share` (one word always stays)
    and `share` of its length in random swaps of two words (at least one)."""
    words = text.split()
    kept = [word for word in words if rng.random() >= share] or words[:1]
    for _ in range(max(1, round(share * len(kept)))):
        i, j = rng.randrange(len(kept)), rng.randrange(len(kept))
        kept[i], kept[j] = kept[j], kept[i]
    return " ".join(kept)


class ParaphraseMemo:
    """English sentences and their round-trip paraphrases, kept in the work folder.

    One line per sentence in `paraphrases.jsonl` (with a digest of the line's content);
    lines are appended a chunk at a time under the entry's lock, so an interrupted run
    loses at most one chunk, two processes never translate the same entry at once, and a
    damaged line is translated again.
    """

    def __init__(self, folder, translator, back_translator, copies):
        self.folder, self.copies = Path(folder), copies
        self.translator, self.back_translator = translator, back_translator

    @classmethod
    def for_translators(cls, translator_run, back_translator_run, copies, work_dir=None):
        found = {role: translation_run(run_id, role) for role, run_id in
                (("translator", translator_run), ("back_translator", back_translator_run))}
        settings = {role: {"run_id": run.info.run_id,
                           "model_sha256": run.data.tags.get("model_sha256")}
                    for role, run in found.items()}
        settings["n_best"] = copies
        folder = cache.work_dir(work_dir) / "augmented" / \
            f"round_trip-{cache.settings_key(settings)}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / cache.SETTINGS_FILE).write_text(json.dumps(settings, indent=2))
        return cls(folder, lambda: load_translator(found["translator"]),
                   lambda: load_translator(found["back_translator"]), copies)

    def paraphrase_units(self, texts):
        """Each text with every sentence replaced by its paraphrase (copy `c` of a text
        that occurs several times takes the `c`-th best one), and a summary."""
        split = [split_sentences(text) for text in texts]
        with cache.producing(self.folder / MEMO_FILE, timeout=-1):  # as long as it takes
            known = read_memo(self.folder / MEMO_FILE)
            todo = sorted({s for sentences in split for s in sentences} - known.keys())
            if todo:
                known.update(self._translate(todo))
        seen, made, changed = {}, [], 0
        for text, sentences in zip(texts, split, strict=True):
            copy = seen[text] = seen.get(text, -1) + 1
            paraphrases = [known[s][copy % len(known[s])] if known[s] else s
                           for s in sentences]
            changed += sum(p != s for p, s in zip(paraphrases, sentences, strict=True))
            made.append(" ".join(paraphrases))
        sentences = sum(map(len, split))
        return made, {"paraphrased_sentences": changed, "augment_sentences": sentences,
                      "newly_translated_sentences": len(todo),
                      "paraphrase_cache": str(self.folder)}

    def _translate(self, sentences):
        """{sentence: paraphrases} for `sentences`, appended to the memo a chunk at a time."""
        forward, back = self.translator(), self.back_translator()
        done = {}
        with tqdm(total=len(sentences), desc="Round-trip translating sentences",
                  disable=None) as progress, \
                open(self.folder / MEMO_FILE, "a", encoding="utf-8") as memo:
            for start in range(0, len(sentences), CHUNK):
                chunk = sentences[start:start + CHUNK]
                paraphrased = round_trip(forward, back, chunk, self.copies)
                memo.write("".join(memo_line(s, p) for s, p in paraphrased.items()))
                memo.flush()
                os.fsync(memo.fileno())
                done.update(paraphrased)
                progress.update(len(chunk))
        return done


def round_trip(forward, back, sentences, copies):
    """{sentence: up to `copies` distinct back-translations}; [] for a sentence too long
    for either translator (it stays as it is)."""
    result = {sentence: [] for sentence in sentences}
    fits = fitting(forward, sentences)
    spanish = forward.translate(fits, beam_width=1) if fits else []
    sources = fitting(back, spanish)
    if not sources:
        return result
    if copies == 1:
        outputs = [[text] for text in back.translate(sources, beam_width=1)]
    else:
        outputs = [[text for text, _ in row] for row in back.n_best(sources, copies)]
    back_translated = dict(zip(sources, outputs, strict=True))
    for sentence, text in zip(fits, spanish, strict=True):
        result[sentence] = [p for p in back_translated.get(text, []) if p.strip()]
    return result


def fitting(translator, sentences):
    """The sentences that fit the translator's source length (and are not empty)."""
    ids = translator.tokenizer.source_ids(sentences) if sentences else []
    return [sentence for sentence, row in zip(sentences, ids, strict=True)
            if 0 < len(row) <= translator.max_source_length]


def memo_line(sentence, paraphrases):
    record = {"sentence": sentence, "paraphrases": paraphrases}
    record["sha256"] = line_digest(record)
    return json.dumps(record, ensure_ascii=False) + "\n"


def line_digest(record):
    content = json.dumps([record["sentence"], record["paraphrases"]], ensure_ascii=False)
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def read_memo(path):
    """{sentence: paraphrases} of the intact lines of `path` (none if it is missing); a
    file cut mid-line gets its newline back, so the next chunk starts a line."""
    known = {}
    if not path.exists():
        return known
    text = path.read_text("utf-8")
    for line in text_lines(text):
        try:
            record = json.loads(line)
            if record["sha256"] == line_digest(record):
                known[record["sentence"]] = record["paraphrases"]
        except (ValueError, KeyError, TypeError):
            continue
    if text and not text.endswith("\n"):
        with open(path, "a", encoding="utf-8") as memo:
            memo.write("\n")
    return known


def translation_run(run_id, role):
    """The logged translator `run_id` (id, prefix or model URI) of the role's direction,
    else the latest one in that direction."""
    from workflows.core import runs, store
    from workflows.core.config import ConfigError

    direction = DIRECTIONS[role]
    if run_id and ":/" in run_id:
        run_id = runs.source_run_id(run_id)
    try:
        run = runs.find_run(TRANSLATION, run_id or None,
                            lambda run: run.data.params.get("direction") == direction)
    except runs.RunNotFoundError as error:
        if run_id:
            raise
        raise runs.RunNotFoundError(
            f"augment=round_trip needs a translator from {direction[:2]} to {direction[3:]} "
            f"and {store.tracking_uri()} has none: train one with python -m "
            f"workflows.translation train --direction {direction} (or give "
            f"--{role.replace('_', '-')} RUN_ID).") from error
    if run.data.params.get("direction") != direction:
        raise ConfigError(f"The {role} must translate {direction}; run {run.info.run_id} "
                          f"translates {run.data.params.get('direction')}.")
    return run


def load_translator(run):
    from workflows.core import models
    from workflows.seq2seq.translator import Translator

    with models.verified_model(run) as local:
        return Translator.load(local / "artifacts" / "translator")
