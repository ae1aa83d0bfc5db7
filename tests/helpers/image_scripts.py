"""The scripts that run inside the runtime image (images/vllm/*.py), loaded as modules for the unit tests: they
are not part of the serving package (the image carries them; the controller never imports them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = REPO / "images" / "vllm"
# What the bench role copies beside bench_client.py on the host (ansible/roles/bench/tasks/main.yml), which the
# client's modules import as top-level modules: serving's standard-library-only knee search, and the probes' HTTP
# over vLLM's unix socket.
BESIDE_THE_CLIENT = {
    "knee": REPO / "serving" / "standalone" / "knee.py",
    "knee_runs": REPO / "serving" / "standalone" / "knee_runs.py",
    "unix_http": REPO / "probes" / "base" / "unix_http.py",
}


def _load(name: str, path: Path) -> ModuleType:
    """The file at path as module `name` (loaded once per test session)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def image_script(name: str) -> ModuleType:
    """images/vllm/<name>.py as module `<name>` (loaded once per test session), its siblings importable beside it
    as on the host, with what the bench role copies there (BESIDE_THE_CLIENT)."""
    for beside, path in BESIDE_THE_CLIENT.items():
        _load(beside, path)
    if str(IMAGE_DIR) not in sys.path:
        sys.path.append(str(IMAGE_DIR))
    return _load(name, IMAGE_DIR / f"{name}.py")
