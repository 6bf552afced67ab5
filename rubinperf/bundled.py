"""Where the bundled specs live.

The top-level folders of the source tree (`hardware/`, `models/`, ...) are the single
source of the bundled specs. A wheel carries copies of them inside the package, as
`rubinperf/_data/<folder>/` (the build hook in `setup.py` copies every folder named in
SPEC_FOLDERS at build time); an editable install or a plain checkout reads the folders
beside the package. This module is also read by `setup.py`, so it imports nothing but the
standard library.
"""

from __future__ import annotations

import functools
from pathlib import Path

# Top-level folders shipped inside the wheel as package data. A new spec folder (e.g.
# `stacks/`) is shipped by adding its name here; folders that do not exist are skipped.
SPEC_FOLDERS = ("hardware", "models", "examples", "validation", "stacks", "calibration")

# Files of those folders left out of the wheel and of kept.py's tree digest: raw device dumps, kept in the repository
# as the record of a run (calibration/hopper/megamoe_sm90/timeline/: 9 MB of per-CTA stamps) and read by no command.
NOT_SHIPPED = ("*.gz",)

DATA_DIR = "_data"  # rubinperf/_data/<folder> inside an installed wheel

SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the checkout, when run from one


@functools.cache
def data_root() -> Path:
    """The folder that holds the bundled spec folders: inside the installed package when
    the wheel carried them, else the source checkout beside the package (found once per run)."""
    beside = Path(__file__).resolve().parent / DATA_DIR
    if beside.is_dir():   # an installed wheel unpacked on disk: no need for importlib.resources
        return beside
    from importlib import resources

    try:
        packaged = resources.files("rubinperf") / DATA_DIR
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - rubinperf is not importable as a package
        packaged = None
    if packaged is not None and packaged.is_dir():
        return Path(str(packaged))
    return SOURCE_ROOT


def folder(name: str) -> Path:
    """One bundled folder (`hardware`, `models`, `examples`, `validation`, ...)."""
    if name not in SPEC_FOLDERS:  # pragma: no cover - a programming error
        raise KeyError(f"{name} is not a bundled folder (known: {', '.join(SPEC_FOLDERS)})")
    return data_root() / name


def resolve_bundled(path_text: str) -> str:
    """A file named as the README names it (`calibration/h200/shapes.csv`), found from any directory: the
    path as given when it exists, else the same relative path under the bundled folders (the checkout's, or
    the installed wheel's copy) when its first part is one of SPEC_FOLDERS; else the path as given, whose
    reading then says what is wrong."""
    p = Path(path_text)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] not in SPEC_FOLDERS:
        return path_text
    bundled = data_root() / p
    return str(bundled) if bundled.is_file() else path_text


def only_bundled(name: str) -> bool:
    """Whether spec name `name` can be read from nothing but a bundled spec (or from no spec at all: an unknown name
    is an error): it has no path separator, no .toml or .json suffix, and no file, folder or link of that name is in
    the working directory (specs/loader.py: resolve_path reads such a file first; specs/model.py: load_model reads a
    config.json or a folder holding one). A result computed from such names alone depends on the bundled files and
    the files of the working directory named as a bundled spec (kept._tree_digest's), nothing else."""
    import os

    if not name or "\0" in name or "/" in name or "\\" in name or name.endswith((".toml", ".json")):
        return False
    try:
        return not os.path.lexists(name)
    except (OSError, ValueError):   # pragma: no cover - lexists says False for these itself
        return False
