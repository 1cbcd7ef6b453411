"""What every benchmark records about the machine, and how it writes its results file."""

import json
import os
from pathlib import Path


def machine(**extra):
    """CPU, core count and Keras backend of this run (plus `extra` fields)."""
    import keras

    from data_prep.runtime import cpu_model

    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "backend": keras.backend.backend(), **extra}


def write_results(results, output):
    """Prints `results` as JSON and writes them to `output` (folders created)."""
    text = json.dumps(results, indent=2)
    print(text)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(text + "\n")
    print(f"Wrote {output}")
