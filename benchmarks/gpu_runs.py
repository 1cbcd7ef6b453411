"""GPU figures from the MLflow runs of the lessons' own commands: `results/gpu.json`.

Every GPU figure the README shows comes from here: runs trained and evaluated with
`python -m workflows.<lesson> ...` on a GPU (see README: GPU), their store copied back
(the SQLite file is enough). Per run: the device and versions, the command, the run
id, wall time with compilation, what XLA compiled, steady-state throughput in useful
(non-padding) tokens, and the share of the device's bf16 peak that this work reaches
(training FLOPs estimated as 6 x parameters x tokens, Kaplan et al. 2020).

    MLFLOW_TRACKING_URI=sqlite:///gpu-mlflow.db python benchmarks/gpu_runs.py
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.reporting import write_results  # noqa: E402
from workflows.core.metric_groups import ungrouped  # noqa: E402

# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets (SXM parts).
BF16_PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12}
LESSONS = ("translation", "language_model", "imdb_sentiment")
# per lesson: the metric of useful tokens per second in training
TOKEN_RATES = {"translation": "target_tokens_per_second", "language_model": "tokens_per_second"}
QUALITY = ("test_sentences", "test_beam4_bleu", "test_beam4_lp3_bleu", "test_greedy_bleu", "test_beam4_chrf",
           "test_beam4_ms_per_sentence", "test_word_perplexity", "test_perplexity",
           "test_accuracy")


def bf16_peak(accelerator):
    return next((peak for name, peak in BF16_PEAKS.items() if name in (accelerator or "")),
                None)


# the settings that decide a GPU's pace, as the run logged them
SETTINGS = ("batch_tokens", "scan_blocks", "steps_per_execution", "random_generator",
            "schedule", "dtype_policy")


def summary(run, lesson):
    """The figures of one run, as the README reports them."""
    metrics, tags, params = ungrouped(run.data.metrics), run.data.tags, run.data.params
    rate = TOKEN_RATES.get(lesson)
    tokens = metrics.get(f"steady_{rate}", metrics.get(f"mean_{rate}")) if rate else None
    parameters = metrics.get("parameters") or float(params.get("parameters", 0)) or None
    peak = bf16_peak(tags.get("accelerator"))
    row = {
        "lesson": lesson, "run_id": run.info.run_id, "command": tags.get("command"),
        "device": tags.get("accelerator") or tags.get("device"),
        "backend": f"{tags.get('backend')} {tags.get('backend_version', '')}".strip(),
        "keras": tags.get("keras_version"), "model": params.get("model"),
        "preset": params.get("preset"), "direction": params.get("direction"),
        "parameters": parameters,
        **{name: params[name] for name in SETTINGS if name in params},
        "train_minutes_with_compilation": metrics.get("train_minutes"),
        "trained_epochs": metrics.get("trained_epochs"),
        "train_step_programs": metrics.get("train_step_programs"),
        "compile_seconds": metrics.get("compile_seconds"),
        "compile_cache_hits": metrics.get("compile_cache_hits"),
        "seconds_to_first_batch": metrics.get("seconds_to_first_batch"),
        "train_wall_minutes": metrics.get("train_wall_minutes"),
        "steady_examples_per_second": metrics.get("steady_examples_per_second"),
        "steady_training_share": metrics.get("steady_training_share"),
        "steady_epoch_wall_seconds": metrics.get("steady_epoch_wall_seconds"),
        "steady_useful_tokens_per_second": tokens,
        "bf16_peak_share": (6 * parameters * tokens / peak
                            if tokens and parameters and peak else None),
        **{name: metrics[name] for name in QUALITY if name in metrics},
        **system_gpu_figures(run.info.run_id)}
    return {key: value for key, value in row.items() if value is not None}


def system_gpu_figures(run_id):
    """The first GPU's use over the run, from MLflow's system metrics (sampled every 2 s
    while it trained): the share of samples busy (above 0%), the mean utilization and
    the most memory used; nothing where the run has none (no GPU, or metrics off)."""
    import mlflow

    history = mlflow.MlflowClient().get_metric_history(
        run_id, "system/gpu_0_utilization_percentage")
    if not history:
        return {}
    samples = [point.value for point in history]
    memory = mlflow.MlflowClient().get_metric_history(
        run_id, "system/gpu_0_memory_usage_megabytes")
    return {"system_gpu_samples": len(samples),
            "system_gpu_busy_share": sum(value > 0 for value in samples) / len(samples),
            "system_gpu_mean_utilization": sum(samples) / len(samples),
            "system_gpu_peak_memory_megabytes": max((p.value for p in memory), default=None)}


def gpu_runs(lessons=LESSONS, run_ids=(), any_device=False):
    """(lesson, run) of every run made on an accelerator (or the runs named, or with
    `any_device` every run: a store of one check's runs, tried on a CPU)."""
    import mlflow

    for lesson in lessons:
        experiment = mlflow.get_experiment_by_name(lesson)
        if experiment is None:
            continue
        for run in mlflow.search_runs([experiment.experiment_id], output_format="list",
                                      order_by=["attributes.start_time ASC"]):
            named = any(run.info.run_id.startswith(prefix) for prefix in run_ids)
            if named or (not run_ids and (any_device or run.data.tags.get("accelerator"))):
                yield lesson, run


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_runs.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--run-id", action="append", default=[],
                        help="only these runs (ids or prefixes; default: every GPU run)")
    parser.add_argument("--any-device", action="store_true",
                        help="every run of the store, on whatever device it ran")
    parser.add_argument("--nvidia-smi", metavar="CSV", help="samples of `nvidia-smi "
                        "--query-gpu=timestamp,utilization.gpu,memory.used --format=csv` "
                        "taken while the first run trained (the GPU check's)")
    parser.add_argument("--output", default="benchmarks/results/gpu.json")
    args = parser.parse_args(argv)
    rows = [summary(run, lesson) for lesson, run in gpu_runs(run_ids=args.run_id,
                                                               any_device=args.any_device)]
    if not rows:
        print("No run made on a GPU in this store (MLFLOW_TRACKING_URI); nothing written.",
              file=sys.stderr)
        return 2
    results = {"runs": rows, "peaks_bf16": BF16_PEAKS}
    if args.nvidia_smi:
        results["check"] = check_figures(rows[0], utilization(args.nvidia_smi))
    write_results(results, args.output)
    return 0


def utilization(csv_path):
    """The GPU's utilization (%) in each sample of an `nvidia-smi` CSV (first GPU)."""
    samples = []
    for line in Path(csv_path).read_text().splitlines()[1:]:
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 2 and fields[1].split(" ")[0].isdigit():
            samples.append(int(fields[1].split(" ")[0]))
    return samples


def check_figures(row, samples):
    """What the GPU check promises, from its training run and the samples taken while
    it trained: busy means any utilization above 0%."""
    return {"seconds_to_first_batch": row.get("seconds_to_first_batch"),
            "gpu_busy_share": sum(s > 0 for s in samples) / len(samples) if samples else None,
            "gpu_mean_utilization": sum(samples) / len(samples) if samples else None,
            "nvidia_smi_samples": len(samples),
            **{name: row.get(name) for name in ("steady_examples_per_second",
                                                "test_beam4_bleu", "test_sentences",
                                                "system_gpu_busy_share",
                                                "system_gpu_mean_utilization")}}


if __name__ == "__main__":
    sys.exit(main())
