"""The machinery every lesson shares, one module per concept.

- `config`: typed configs (`option`, `when`/`unless` rules, `Catalog`), overrides and
  their checks; what a lesson declares (`Lesson`: its catalog, `train`, comparison;
  `ModelExport`).
- `cli`: `LessonCLI`, the command line every lesson declares, and the error policy.
- `training`: `TrainingRun`, the steps of a training a lesson calls in order (load the
  data, open the run folder, start or resume the MLflow run, fit, export); `fitting`:
  the resumable `fit` under it (early stopping, a wall budget, stops at any moment);
  `horizon`: a learning-rate schedule sized to the steps the run affords; `checkpoints`: the run folder's state and
  weight files, written atomically, checked by digest, falling back to the newest
  intact one.
- `devices`: where a run trains, in which precision and with which dropout generator
  (processes, mirrored or data-parallel devices); `batches`: the batches in few fixed
  shapes that `fit` reads; `compilation`: what XLA compiled (compiled model calls,
  counted, the persistent cache, every batch shape's steps compiled ahead). The three
  ship with every logged model.
- `models`: the logged model: exported with its code and digest, loaded verified;
  `model_folder`: the one folder format every trained model is saved in.
- `runs`: finding, comparing and registering runs; evaluations logged back to them.
- `store`: the MLflow store, its experiments and run tags, whether it answers, and what a
  training run logs there.
- `search`, `search_space`, `search_summary`: Optuna studies of configs (and `--sweep`,
  a grid search).
- `figures`, `servers`: the plots runs log; the HTTP servers of models and the UI.
"""
