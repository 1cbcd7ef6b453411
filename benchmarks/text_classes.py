"""Your own labelled texts, measured on a real set: the IMDB reviews' star ratings.

The file names of the reviews (`ID_RATING.txt`) hold their ratings, 1-4 and 7-10:
eight classes. This writes them as a user's files (the official train reviews as
`--texts`, the official test reviews as `--test-texts`, in the work folder, never in
the repository), trains each family on them through the lesson's own `train` (the
validation split is carved from train) and scores it on the 25,000 test reviews; and
measures the floor on the same split, a TF-IDF uni+bigram logistic regression
(scikit-learn, installed by hand: `pip install scikit-learn`).

`--classes three` merges the ratings into three classes with a majority over half
(1: negative, 2-9: mixed, 10: positive; the middle holds about 60%, as neutral news
do) and trains each family with and without `class_weight=balanced`.

    python benchmarks/text_classes.py --imdb-path ../shared/data/aclImdb_v1.tar.gz \
        --model bow --model nbsvm --model bilstm

`--ensemble sqrt_balanced` then stacks the runs trained (and any `--member` runs of the
store) with that weighting and scores the ensemble the same way.

Writes `benchmarks/results/text_classes_<eight|three>.json`.
"""

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.reporting import machine, write_results  # noqa: E402

RESULTS = Path(__file__).with_name("results")
THREE = {1: "negative", 10: "positive"}  # every other rating: mixed


def write_rating_files(archive, folder, classes):
    """`(train.tsv, test.tsv)` of the archive's labelled reviews and their ratings."""
    from data_prep.text import clean_html

    folder.mkdir(parents=True, exist_ok=True)
    paths = {split: folder / f"ratings_{classes}_{split}.tsv" for split in ("train", "test")}
    if all(path.exists() for path in paths.values()):
        return paths["train"], paths["test"]
    rows = {"train": [], "test": []}
    with tarfile.open(archive) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 4 or parts[2] not in ("pos", "neg"):
                continue
            if parts[1] not in rows:
                continue
            rating = int(parts[3].rsplit("_", 1)[1].split(".")[0])
            text = clean_html(tar.extractfile(member).read().decode("utf-8"))
            label = str(rating) if classes == "eight" else THREE.get(rating, "mixed")
            rows[parts[1]].append((member.name, text, label))
    for split, path in paths.items():
        partial = path.with_suffix(".partial")
        with partial.open("w", encoding="utf-8") as file:
            file.write("text\tlabel\n")
            for _, text, label in sorted(rows[split]):
                file.write(" ".join(text.split()) + f"\t{label}\n")
        partial.replace(path)
    return paths["train"], paths["test"]


def tfidf_floor(train, test, c_values=(2.0, 8.0)):
    """Accuracy and macro-F1 of scikit-learn's TF-IDF uni+bigram logistic regression."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import accuracy_score, f1_score
    except ImportError:
        print("scikit-learn is not installed: the TF-IDF floor is not measured.")
        return []
    from data_prep.labelled_texts import read_classes

    (train_texts, train_labels), (test_texts, test_labels) = (read_classes(train),
                                                              read_classes(test))
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    features = vectorizer.fit_transform(train_texts)
    test_features = vectorizer.transform(test_texts)
    rows = []
    for c in c_values:
        started = time.perf_counter()
        model = LogisticRegression(C=c, max_iter=2000).fit(features, train_labels)
        predicted = model.predict(test_features)
        rows.append({"model": f"scikit-learn TF-IDF 1-2-gram logistic regression (C={c:g})",
                     "accuracy": round(accuracy_score(test_labels, predicted), 4),
                     "macro_f1": round(f1_score(test_labels, predicted, average="macro"), 4),
                     "minutes": round((time.perf_counter() - started) / 60, 2)})
        print(rows[-1])
    return rows


def train_and_score(model, train, test, overrides, work_dir):
    """Trains `model` on the files through the lesson and scores it on the test file."""
    from workflows import imdb_sentiment as lesson
    from workflows.core.lesson import DataPlace
    from workflows.core.training import train_lesson

    started = time.perf_counter()
    config = lesson.CATALOG.make(model, None, overrides)
    place = DataPlace(None, work_dir, {"texts": str(train), "test_texts": str(test)})
    run_id = train_lesson(lesson.LESSON, config, place)
    metrics = lesson.evaluate(run_id, work_dir=work_dir)
    changed = ", ".join(f"{key}={value}" for key, value in overrides.items())
    return {"model": model + (f" ({changed})" if changed else ""), "run_id": run_id,
            **measures(metrics), "minutes": round((time.perf_counter() - started) / 60, 2)}


def score_run(run_id, work_dir):
    """A run of the store trained earlier (`--member`), scored on its test file; named
    by its model and the settings it changed from the model's defaults."""
    import dataclasses

    import mlflow

    from workflows import imdb_sentiment as lesson
    from workflows.core import store

    started = time.perf_counter()
    store.use_experiment(lesson.EXPERIMENT)  # the lesson's store, where the run is
    params = mlflow.get_run(run_id).data.params
    defaults = dataclasses.asdict(lesson.CATALOG.make(params["model"]))
    changed = ", ".join(f"{key}={params[key]}" for key, value in defaults.items()
                        if key in params and params[key] != str(value)
                        and key not in ("val_fraction", "max_train_minutes"))
    metrics = lesson.evaluate(run_id, work_dir=work_dir)
    return {"model": params["model"] + (f" ({changed})" if changed else ""), "run_id": run_id,
            **measures(metrics), "minutes": round((time.perf_counter() - started) / 60, 2)}


def measures(metrics):
    return {name: round(metrics[name], 4) for name in
            ("accuracy", "macro_f1", "weighted_f1", "expected_calibration_error")}


def ensemble_and_score(run_ids, class_weight, work_dir):
    """The ensemble of `run_ids` (stacking weighed by `class_weight`) scored on the test
    file: an ensemble of the same members and weighting is reused."""
    import mlflow

    from workflows import imdb_sentiment as lesson

    started = time.perf_counter()
    run_id = lesson.ensemble(run_ids, work_dir=work_dir, class_weight=class_weight)
    metrics = lesson.evaluate(run_id, work_dir=work_dir)
    members = " + ".join(mlflow.get_run(member).data.params["model"] for member in run_ids)
    return {"model": f"ensemble of {members} (stacking class_weight={class_weight})",
            "run_id": run_id, "members": list(run_ids), **measures(metrics),
            "minutes": round((time.perf_counter() - started) / 60, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/text_classes.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--imdb-path", required=True, help="aclImdb_v1.tar.gz")
    parser.add_argument("--work-dir")
    parser.add_argument("--classes", choices=("eight", "three"), default="eight")
    parser.add_argument("--model", action="append", help="a family (repeatable; default "
                        "bow, nbsvm and bilstm)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config field for every run (repeatable)")
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--member", action="append", default=[], metavar="RUN_ID",
                        help="a run of the store trained earlier: scored, and added to the "
                             "ensembles")
    parser.add_argument("--ensemble", action="append", default=[], metavar="CLASS_WEIGHT",
                        help="then ensemble the runs (trained here and --member) with this "
                             "stacking weight (none, balanced, sqrt_balanced; repeatable)")
    args = parser.parse_args(argv)
    from data_prep import cache
    from process.commands import import_backend

    import_backend()
    overrides = dict(item.split("=", 1) for item in args.set)
    train, test = write_rating_files(args.imdb_path, cache.work_dir(args.work_dir) / "benchmark"
                                     / "ratings", args.classes)
    output = RESULTS / f"text_classes_{args.classes}.json"
    earlier = json.loads(output.read_text())["rows"] if output.exists() else []
    rows = [] if args.skip_floor else tfidf_floor(train, test)
    models = args.model or ([] if args.member else ["bow", "nbsvm", "bilstm"])
    trained = []

    def record(row):
        rows.append(row)
        print(row)
        measured = {row["model"] for row in rows}  # an earlier row of another model stays
        kept = [row for row in earlier if row["model"] not in measured]
        write_results({"machine": machine(), "classes": args.classes,
                       "train": "official train reviews (validation: 10% of them)",
                       "test": "official test reviews (25,000)", "rows": kept + rows},
                      output)

    for model in models:
        weightings = ("none", "balanced") if args.classes == "three" else ("none",)
        for weighting in weightings:
            extra = {**overrides, **({"class_weight": weighting} if weighting != "none" else {})}
            record(train_and_score(model, train, test, extra, args.work_dir))
            trained.append(rows[-1]["run_id"])
    for member in args.member:
        record(score_run(member, args.work_dir))
    for class_weight in args.ensemble:
        record(ensemble_and_score(trained + args.member, class_weight, args.work_dir))


if __name__ == "__main__":
    main()
