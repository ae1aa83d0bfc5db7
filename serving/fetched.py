"""What a probe or bench wrote on the host, once fetched to the controller as one archive: unpacked into the run
directory under its own name, with the records the controller adds beside it, and the archive removed.

In-process on the controller (the action plugin refdeploy_unpack): as unarchive, command (mv), file and copy tasks
delegated to localhost it was five module runs, 0.3-0.9 s each here, after every capture window.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class UnpackError(ValueError):
    pass


def unpack(archive: Path | None, dest: Path, top: str, name: str, records: Mapping[str, Any]) -> Path:
    """dest/name: the archive's top-level directory `top`, unpacked (tarfile's "data" filter: no absolute paths,
    no links out of it, no devices) and renamed, or an empty directory where nothing was fetched; each record
    written into it as JSON. The archive is removed once unpacked."""
    target = dest / name
    if archive is not None and archive.exists():
        staging = dest / f".{name}.unpacking"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
        except (tarfile.TarError, OSError) as e:
            raise UnpackError(f"{archive}: {e}") from None
        unpacked = staging / top
        if not unpacked.is_dir():
            raise UnpackError(f"{archive}: no {top}/ in it")
        if target.exists():
            raise UnpackError(f"{target} exists already")
        unpacked.rename(target)
        shutil.rmtree(staging)
        archive.unlink()
    target.mkdir(parents=True, exist_ok=True)
    for file, data in records.items():
        if "/" in file or file.startswith("."):
            raise UnpackError(f"record {file!r}: a plain file name, please")
        (target / file).write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")
    return target
