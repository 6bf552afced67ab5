"""The bundle `--save-dir DIR` writes: a run's tables (CSV and JSON), its charts (SVG; PNG where matplotlib is
installed), the HTML report, the command line, the resolved specs (TOML) and the versions, with a README.txt
that lists them (presentation only: the records and texts come in whole).

Written whole or not at all: a new DIR is filled beside it under a temporary name and renamed into place;
into an existing directory every file goes through `rubinperf.files.write_atomic`, after every target has
been checked, so that a path that is a directory, a FIFO or a device refuses the bundle before any file
is written. Nothing that is not a regular file is ever replaced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rubinperf.errors import SpecError, shorten

README_HEAD = "rubinperf bundle: what one run computed, and from what.\n\n"


def check_save_dir(path: str) -> Path:
    """Fail before any work when DIR cannot hold a bundle: something else than a directory is there, or
    its parent does not exist."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise SpecError(f"--save-dir {shorten(path)}: exists and is not a directory")
        return p
    if not p.parent.is_dir():
        raise SpecError(f"--save-dir {shorten(path)}: no such directory {shorten(str(p.parent))}")
    return p


class Bundle:
    """Files of one bundle, by relative path, in the order added; described in README.txt."""

    def __init__(self, command: str, versions: dict):
        self.files: dict[str, str | bytes] = {}
        self.about: dict[str, str] = {}
        self.missing: list[str] = []
        self.command, self.versions = command, versions

    def add(self, name: str, data: str | bytes, about: str) -> None:
        self.files[name] = data
        self.about[name] = about

    def table(self, name: str, records: list[dict], about: str) -> None:
        from rubinperf.render.output import to_csv, to_json

        self.add(f"{name}.json", to_json(records) + "\n", f"{about} (JSON: every field, SI units)")
        self.add(f"{name}.csv", to_csv(records), f"{about} (CSV: the flat fields; nested ones are in the JSON)")

    def chart(self, name: str, svg_text: str, about: str, figure=None) -> None:
        """`figure`: a function returning the matplotlib figure of the same chart (for the PNG), or None."""
        from rubinperf.render import plots

        self.add(f"{name}.svg", '<?xml version="1.0" encoding="UTF-8"?>\n' + svg_text + "\n", about + " (SVG)")
        if figure is None:
            self.missing.append(f"{name}.png: this chart is drawn as SVG only")
        elif not plots.has_matplotlib():
            self.missing.append(f"{name}.png: not written, matplotlib is not installed ({plots.INSTALL_HINT})")
        else:
            self.add(f"{name}.png", plots.figure_bytes(figure(), "png"), about + " (PNG, matplotlib)")

    def finish(self) -> None:
        import json

        self.add("command.txt", self.command + "\n", "the exact command line of this run")
        self.add("versions.json", json.dumps(self.versions, indent=2) + "\n", "versions of rubinperf, Python and "
                 "the libraries")
        width = max(len(n) for n in self.about)
        lines = [README_HEAD, f"command: {self.command}\n\n"]
        lines += [f"{n.ljust(width)}  {a}\n" for n, a in self.about.items()]
        if self.missing:
            lines.append("\nnot in this bundle:\n" + "".join(f"  {m}\n" for m in self.missing))
        self.files["README.txt"] = "".join(lines)

    def write(self, directory: str) -> None:
        self.finish()
        write_tree(Path(directory), self.files)


def write_tree(root: Path, files: dict[str, str | bytes]) -> None:
    """Write `files` (relative path -> content) under `root`: atomically as a whole when root is new."""
    from rubinperf import files as fs

    check_save_dir(str(root))
    if not root.exists():
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
        try:
            for rel, data in files.items():
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
            os.chmod(tmp, 0o777 & ~_umask())
            os.rename(tmp, root)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SpecError(f"--save-dir {shorten(str(root))}: cannot write: {exc.strerror or exc}") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return
    for rel in files:   # every target checked before the first is written
        _check_target(root, rel, fs)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        fs.write_atomic(root / rel, data)


def _check_target(root: Path, rel: str, fs) -> None:
    path = root / rel
    for parent in list(path.relative_to(root).parents)[:-1]:
        d = root / parent
        if (d.exists() or d.is_symlink()) and not d.is_dir():
            raise SpecError(f"--save-dir: {shorten(str(d))} is not a directory; refusing to write the bundle")
    if path.parent.is_dir():
        try:
            fs.regular_target(path)
        except SpecError as exc:
            raise SpecError(f"--save-dir: {exc}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
