"""The machinery every lesson shares, one module per concept.

- `lesson`: the lesson contract (`Lesson`, with its hooks `load_data`, `datasets`, `build`,
  `fit`, `export`; `DataPlace`, `TrainRequest`, `Built`, `ModelExport`) and the registry of
  lessons (every module of `workflows/` that declares `LESSON`).
- `config`: typed configs (`option`, `when`/`unless` rules, `Catalog`), overrides and
  their checks; `TrainingOptions`, the training settings every lesson shares.
- `cli`: `LessonCLI`, the command line every lesson declares, and the error policy;
  `step_inputs`: what a step reads beside the lesson's flags (`--config`/`--set`/`--sweep`
  overrides, texts as arguments or `--file`).
- `training`: `train_lesson`, the one lifecycle that runs a lesson's hooks, and
  `TrainingRun`, its steps (load the data, open the run folder, start or resume the
  MLflow run, fit with the shared training options, export); `fitting`:
  the resumable `fit` under it (checkpoints, stops at any moment); `stopping`: when it
  ends (epochs, early stopping on a `Monitor`, the wall-time budget);
  `horizon`: a learning-rate schedule sized to the steps the run affords;
  `checkpoints`: the run folder's state and weight files, written atomically, checked
  by digest, falling back to the newest intact one; `weight_files`: those files;
  `exported_weights`: which weights a run exports (the best epoch's or an average).
- `devices`: where a run trains (processes, mirrored or data-parallel devices);
  `precision`: in which dtype policy and with which dropout generator; `batches`: the
  batches in few fixed shapes that `fit` reads; `compilation`: what XLA compiled
  (compiled model calls, counted, the persistent cache, every batch shape's steps
  compiled ahead). The four ship with every logged model.
- `models`: the logged model: exported with its code and digest, loaded verified;
  `model_folder`: the one folder format every trained model is saved in; `export`: a
  run's model out of the kit (ONNX, SavedModel, LiteRT; int8), the `export` step's
  (shipped with every logged model too: a served model may answer through its export).
- `runs`: finding, comparing and registering runs; evaluations logged back to them.
- `store`: the MLflow store, its experiments, runs opened and ended there, whether it
  answers; `tracking`: what a run records there (tags, params, its setup, each epoch,
  its summary and curves).
- `tuning`, `tuning_space`, `tuning_summary`: the `tune` step's Optuna studies of configs
  (and `train --sweep`, a grid).
- `figures`, `servers`: the plots runs log; the HTTP servers of models and the UI
  (`server_flags`: their flags; `scoring_app`: the served model's request limits).
- `settings_docs`: the lesson docs' tables of settings, written from the fields' help.
"""
