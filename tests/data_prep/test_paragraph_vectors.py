"""Paragraph vectors: training on given texts, inference that depends on the text only."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_prep.paragraph_vectors import ParagraphVectors, ParagraphVectorSettings, tokenize

ROOT = Path(__file__).parents[2]
TEXTS = ["A great movie, I loved it!", "Awful. Boring and far too long?",
         "Great acting, a great film.", "Dull plot <br />and awful dialogue."] * 25


def test_tokenize_lowercases_drops_html_and_keeps_exclamations():
    assert tokenize("I <br />didn't LIKE it!! Really?") == [
        "i", "didn't", "like", "it", "!", "!", "really", "?"]


@pytest.mark.integration
@pytest.mark.parametrize("dm", [False, True])
def test_a_texts_vector_is_the_same_in_any_batch_and_any_process(tmp_path, dm):
    vectors = ParagraphVectors.train(TEXTS, ParagraphVectorSettings(
        vector_size=8, epochs=3, min_count=1, dm=dm), workers=1)
    assert vectors.model.corpus_count == len(TEXTS)
    probes = ["great film", "", "awful and boring"]
    inferred = vectors.infer(probes)
    assert inferred.shape == (3, 8) and np.isfinite(inferred).all()
    assert np.array_equal(vectors.infer(probes[::-1])[::-1], inferred)
    vectors.for_inference().save(tmp_path / "doc2vec")  # as a logged model holds it
    assert len(ParagraphVectors.load(tmp_path / "doc2vec").model.dv) == 0
    script = ("import json, sys; from data_prep.paragraph_vectors import ParagraphVectors; "
              f"v = ParagraphVectors.load({str(tmp_path / 'doc2vec')!r}); "
              f"print(json.dumps(v.infer({probes!r}).tolist()))")
    for hash_seed in ("1", "2"):  # Python's str hash differs between these processes
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                env={"PYTHONHASHSEED": hash_seed, "PATH": ""}, timeout=120,
                                cwd=ROOT)
        assert result.returncode == 0, result.stderr[-2000:]
        assert np.allclose(json.loads(result.stdout), inferred, atol=1e-6)


def test_texts_inferred_in_parallel_threads_get_their_own_vectors():
    from concurrent.futures import ThreadPoolExecutor

    vectors = ParagraphVectors.train(TEXTS, ParagraphVectorSettings(
        vector_size=8, epochs=3, min_count=1), workers=1)
    probes = [f"great film number {i}" for i in range(40)]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda text: vectors.infer([text])[0], probes))
    assert np.array_equal(np.stack(parallel), vectors.infer(probes))
