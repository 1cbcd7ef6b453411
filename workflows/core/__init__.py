"""The machinery every lesson shares, one module per concept.

- `lesson`: what a lesson gives the rest (`Lesson`, `TrainingPlan`, `ModelExport`).
- `config`: typed configs (`option`, `Catalog`), overrides and their checks.
- `cli`: `LessonCLI`, the command line every lesson declares, and the error policy.
- `training`: a run and its training: start or resume, log, average, export, finish.
- `checkpoints`: the resumable `fit` (checkpoints, early stopping, time budget).
- `models`: the logged model: exported with its code and digest, loaded verified.
- `runs`: finding, comparing and registering runs; evaluations logged back to them.
- `store`: the MLflow store, its experiments and run tags; whether it answers.
- `distribution`, `precision`, `compilation`: where a run trains, in which precision,
  and what XLA compiled (with compiled model calls, shipped with every logged model).
- `search`, `search_space`, `search_summary`: Optuna studies of configs (and `--sweep`,
  a grid search).
- `figures`, `servers`: the plots runs log; the HTTP servers of models and the UI.
"""
