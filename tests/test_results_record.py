"""`benchmarks/RESULTS.md` is generated from `benchmarks/results/*.json` and up to date."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("results_report",
                                              ROOT / "benchmarks" / "results_report.py")
results_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_report)


def test_results_md_is_what_the_results_files_generate():
    assert results_report.main(["--check"]) == 0, \
        "run: python benchmarks/results_report.py"


def test_every_results_file_is_rendered_with_its_record_tables_and_figures(tmp_path):
    (tmp_path / "decoding.json").write_text(json.dumps({
        "title": "Decoding speed",
        "record": ["Greedy against beam.", {"table": [{"mode": "greedy", "ms": 4.4},
                                                      {"mode": "beam 4", "ms": 12.25}]}],
        "machine": {"cpu": "Intel Xeon", "cores": 2},
        "runs": {"a": {"bleu": 46.123456, "steps": 12000}, "b": {"bleu": 47.4}},
    }))
    text = results_report.report(tmp_path)
    assert "## Decoding speed" in text and "Greedy against beam." in text
    assert "| mode | ms |" in text and "| beam 4 | 12.25 |" in text
    assert "| cpu | Intel Xeon |" in text
    assert "|  | bleu | steps |" in text and "| a | 46.12 | 12,000 |" in text
    assert "| b | 47.4 |  |" in text
