"""The scripts that run inside the runtime image (images/vllm/*.py), loaded as modules for the unit tests: they
are not part of the serving package (the image carries them; the controller never imports them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

IMAGE_DIR = Path(__file__).resolve().parents[1] / "images" / "vllm"


def image_script(name: str) -> ModuleType:
    """images/vllm/<name>.py as module `<name>` (loaded once per test session)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, IMAGE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
