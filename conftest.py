"""Suite-wide (tests and the layers' doctests): each test starts from float32 layers;
JAX compiles without its costly optimizations.

Building a mixed-precision model sets Keras' global dtype policy; with the suite spread
over workers, a later test or doctest in the same worker would inherit it.
"""

import os

# The suite's tiny models compile more often than they run: JAX (in this process and in
# the lessons' subprocesses, which inherit it) skips XLA's costly optimization passes,
# which buy nothing here; the programs compute the same, up to float rounding.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# Likewise the search lesson's encoder on TensorFlow compiles without XLA (3-4x faster
# for these tests) in the quick tier; the integration tier runs it as users do, with XLA
# (`xla_as_users_run_it`).
os.environ.setdefault("NLPKIT_XLA", "0")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def xla_as_users_run_it(request, monkeypatch):
    if request.node.get_closest_marker("integration"):
        monkeypatch.setenv("NLPKIT_XLA", "1")


@pytest.fixture(autouse=True)
def float32_policy():
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


# The integration tier: second backends, several processes or devices, the browser,
# PostgreSQL, real servers. `python -m pytest` (pyproject: -m "not integration") runs the
# rest, the quick tier; `python -m pytest -m integration` runs these; `.ci/run` runs both.
INTEGRATION_MARKS = ("slow", "browser", "team_server")
INTEGRATION_FILES = ("tests/workflows/test_concurrency.py", "tests/workflows/test_mlflow_ui.py",
                     "tests/workflows/test_serving.py", "tests/workflows/test_distribution.py")
INTEGRATION_TESTS = (  # file::test (any parameters): each starts other processes, or
    # trains a second model end to end (another lesson's, a fine-tune, a sweep's children:
    # a minute or so on two cores); each lesson's own run stays in the quick tier
    "tests/workflows/test_translation.py::test_es_en_direction_end_to_end",
    "tests/workflows/test_translation.py::test_one_vocabulary_for_both_languages",
    "tests/workflows/test_imdb_sentiment.py::test_lm_classifier_transfers_a_language_model",
    "tests/workflows/test_imdb_sentiment.py::test_logged_model_predicts_from_strings_in_a_fresh",
    "tests/data_prep/test_paragraph_vectors.py::test_a_texts_vector_is_the_same_in_any_batch",
    "tests/workflows/test_language_model.py::test_logged_model_generates_in_a_fresh_process",
    "tests/workflows/test_language_model.py::test_benchmark_compares_cached_and_uncached",
    "tests/workflows/test_language_model.py::test_fine_tuning_keeps_the_tokenizer_and_reports",
    "tests/workflows/test_language_model.py::test_fine_tuning_can_add_the_new_corpus_words",
    "tests/workflows/test_imdb_sentiment.py::test_ensemble_fits_weights_on_validation_only_and",
    "tests/workflows/test_imdb_sentiment.py::test_sweep_makes_one_parent_and_a_child_per_setting",
    "tests/workflows/test_augmentation.py::test_a_model_trains_on_round_trip_paraphrases_of_train",
    "tests/workflows/test_outside_failures.py::test_a_store_file_deleted_mid_run_is_one_line_and",
    "tests/workflows/test_outside_failures.py::test_search_workers_are_capped_by_the_cores",
    "tests/workflows/test_outside_failures.py::test_a_store_that_never_answers_is_reported",
    "tests/workflows/test_outside_failures.py::test_sigterm_to_a_search_stops_its_workers",
    "tests/workflows/test_outside_failures.py::test_sigterm_to_an_encoder_training_ends_it",
    "tests/workflows/test_reliability.py::test_data_prep_commands_report_a_bad_archive",
    "tests/workflows/test_retrieval.py::test_the_logged_model_answers_in_a_fresh_process",
    "tests/workflows/test_retrieval.py::test_label_writes_every_line_in_order_and_resumes[2]",
    "tests/workflows/test_retrieval.py::test_the_served_retriever_answers",
    "tests/workflows/test_retrieval.py::test_a_stopped_label_says_what_it_kept_and_goes_on",
    "tests/workflows/test_retrieval.py::test_a_cold_start_fine_tunes_on_pseudo_queries",
    "tests/workflows/test_retrieval.py::test_a_catalogue_alone_validates_on_held_out_pseudo",
    "tests/workflows/test_search.py::test_two_workers_share_one_study",
    "tests/workflows/test_search.py::test_a_killed_workers_trial_is_queued_again",
    "tests/workflows/test_translation.py::test_exported_translator_round_trips_strings",
    "tests/workflows/test_translation.py::test_served_translator_answers_strings",
    "tests/workflows/test_translation.py::test_decoding_benchmark_matches_the_tutorial_loop",
    "tests/workflows/test_quick_start.py::test_a_step_still_loads_what_it_needs",
    "tests/workflows/test_search.py::test_a_search_block_in_the_yaml_config_is_read",
    "tests/workflows/test_encoder_classifier.py::test_the_encoder_fine_tunes_from_its_pretrained",
    "tests/workflows/test_augmentation.py::test_the_paraphrase_cache_is_keyed_by_translators",
    "tests/workflows/test_retrieval.py::test_dense_fine_tuning_improves_a_planted_task",
    # decoding paths and second checks of a lesson's run (5 to 10 s each on two cores): the
    # quick tier keeps its answer within 3 minutes
    "tests/workflows/test_translation.py::test_translate_prints_n_best_with_scores",
    "tests/workflows/test_translation.py::test_beam_width_param_is_declared_validated_and",
    "tests/workflows/test_seq2seq.py::test_a_saved_translator_reloads_as_its_class_and",
    "tests/workflows/test_language_model.py::test_a_fixed_seed_gives_the_same_sample",
    "tests/workflows/test_search.py::test_the_pruner_stops_a_trial_forced_to_be_poor",
    "tests/workflows/test_retrieval.py::test_an_encoder_archive_of_other_weights_is_another",
    "tests/workflows/test_retrieval.py::test_a_passage_retriever_above_the_exact_limit_saves",
    "tests/workflows/test_reliability.py::test_a_run_whose_checkpoints_are_all_damaged_starts",
    "tests/workflows/test_imdb_sentiment.py::test_an_ensemble_with_the_lexicon_fitted_on_slices",
)


def is_integration(item):
    return (any(item.get_closest_marker(mark) for mark in INTEGRATION_MARKS)
            or item.nodeid.split("::")[0] in INTEGRATION_FILES
            or item.nodeid.startswith(INTEGRATION_TESTS))


def pytest_collection_modifyitems(config, items):
    """Marks the integration tier; then orders the files for the two workers.

    The test runner hands whole files to its workers in this order (pyproject sets
    `--no-loadscope-reorder`), each package's files together, which builds its package
    fixtures (the workflows' shared store) once per worker instead of at every return
    to the package. The integration tier runs the packages with long (integration)
    tests first, the one with the fewest such files leading (the layer tests re-run on
    JAX: one worker takes that file while the other starts the workflows); the quick
    tier runs the packages with the most tests first (the lessons'). In a package,
    files with long tests first, then the files with the most tests; the short files
    fill in at the end.
    """
    files = {}
    for item in items:
        if is_integration(item):
            item.add_marker(pytest.mark.integration)
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    long = {name for name, tests in files.items()
            if any(test.get_closest_marker("integration") for test in tests)}
    packages = {}
    for name in files:
        packages.setdefault(name.rpartition("/")[0], []).append(name)
    if config.getoption("markexpr") == "not integration":
        def package_order(package):
            return -sum(len(files[name]) for name in packages[package])
    else:
        long_files = {package: sum(name in long for name in names)
                      for package, names in packages.items()}

        def package_order(package):
            return long_files[package] == 0, long_files[package]
    order = [name for package in sorted(packages, key=package_order)
             for name in sorted(packages[package],
                                key=lambda name: (name not in long, -len(files[name])))]
    items[:] = [item for name in order for item in files[name]]
