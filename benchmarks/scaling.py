"""The cost of the distributed training path: each distribution choice on the same pairs.

Trains the translation `cpu` preset on the same `--pairs` training pairs under each
choice this backend offers (`none` and `mirrored` on TensorFlow, `none` and
`data_parallel` on JAX), taking turns over `--rounds` passes after an untimed one that
compiles, so machine noise hits them alike. On one device the distributed path should
cost nothing beyond noise; with several devices (GPUs, or host devices on JAX with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`) it shows the speed-up.

    python benchmarks/scaling.py --spa-eng-path ../shared/data/spa-eng.zip
    KERAS_BACKEND=jax python benchmarks/scaling.py --spa-eng-path ../shared/data/spa-eng.zip

Adds this backend's figures to `benchmarks/results/scaling.json`.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from reporting import machine, write_results  # noqa: E402  (benchmarks/, beside this file)

RESULTS = Path(__file__).with_name("results") / "scaling.json"
CHOICES = {"tensorflow": ("none", "mirrored"), "jax": ("none", "data_parallel")}


def main(argv=None):
    import keras
    import numpy as np

    from data_prep import spa_eng
    from workflows import translation as workflow
    from workflows.core import devices
    from workflows.core.batches import for_backend
    from workflows.translation import build_model

    parser = argparse.ArgumentParser(prog="python benchmarks/scaling.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument(spa_eng.SPA_ENG.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--pairs", type=int, default=4096, help="training pairs per pass")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    backend = keras.backend.backend()
    config = workflow.make_config("transformer", "cpu")
    data = workflow.load_data(config, args.spa_eng_path, args.work_dir)
    source, target = data.arrays["train"]
    chosen = np.random.default_rng(0).permutation(len(source))[:args.pairs]
    data.arrays = {"train": ([source[i] for i in chosen], [target[i] for i in chosen])}
    runs = {}
    for choice in CHOICES[backend]:
        with devices.placed(choice) as placement:
            keras.utils.set_random_seed(config.seed)
            model = build_model(config, *data.tokenizer.vocabulary_sizes)
        runs[choice] = {"placement": placement, "model": model, "seconds": []}
    for round_index in range(args.rounds + 1):
        for choice, run in runs.items():
            placement = run["placement"]
            with placement.scope():
                # the same batches every pass: no new shapes to compile in a timed one
                batches = placement.batches(data.batches(config, "train", epoch=0))
                dataset = for_backend(batches) if choice != "data_parallel" else batches
                started = time.perf_counter()
                run["model"].fit(dataset, verbose=0)
                if round_index:  # the first pass compiles
                    run["seconds"].append(time.perf_counter() - started)
    figures = {choice: {"devices": [str(d) for d in run["placement"].devices],
                        "median_seconds": statistics.median(run["seconds"]),
                        "pairs_per_second": args.pairs / statistics.median(run["seconds"]),
                        "seconds": run["seconds"]} for choice, run in runs.items()}
    plain, distributed = (figures[choice]["median_seconds"] for choice in CHOICES[backend])
    results = json.loads(Path(args.output).read_text()) if Path(args.output).exists() else {}
    results[backend] = {"pairs": args.pairs, "rounds": args.rounds, "preset": "cpu",
                        "choices": figures,
                        "distributed_over_plain_time": distributed / plain,
                        "machine": machine()}
    write_results(results, args.output)


if __name__ == "__main__":
    main()
