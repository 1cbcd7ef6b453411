"""The process machinery every command shares, apart from the data and the lessons.

- `commands`: how a command starts (`run_main`: the backend chosen, stop signals
  handled, the error policy applied) and `import_backend`;
- `stops`: stop signals (Ctrl-C, SIGTERM) turned into a `Stop` at a safe moment, a
  second signal exiting at once;
- `errors`: the error policy: `UserError` and `KeptWorkError`, each one `error:` line
  (exit status 2 and 1), and the outside failures a user can fix (a full disk, a folder
  or store it may not write).

It imports nothing of the project: `layers/`, `data_prep/` and `workflows/` all use it.
"""
