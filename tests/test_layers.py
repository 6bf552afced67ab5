"""One direction: the core never imports presentation (rubinperf.render, rubinperf.cli).

Every import statement of every core module is read from its source (imports inside functions
too, relative ones resolved), so an import that runs only on some path is caught as well. The core
may use rubinperf.files (writing files) and rubinperf.units (number formats): neutral ground.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PKG = REPO / "rubinperf"

# The core: packages (every module under them) and modules, by their name under rubinperf/.
CORE = (
    "__init__", "architecture", "bundled", "calibrate", "capacity", "cost", "engine", "errors", "files", "graph",
    "kernels", "layout", "mathops", "precision", "records", "roofline", "scenario",
    "sensitivity", "serving", "specs", "step", "symbolic", "units", "validate",
)
# Presentation: what the core must not import.
PRESENTATION = ("render", "cli", "entry", "__main__")
FORBIDDEN = tuple(f"rubinperf.{name}" for name in PRESENTATION)


def _top_level() -> set[str]:
    """Names directly under rubinperf/: modules (without .py) and packages."""
    names = {p.stem for p in PKG.glob("*.py")}
    names |= {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return names


def _files(name: str) -> list[Path]:
    path = PKG / name
    if path.is_dir():
        return sorted(path.rglob("*.py"))
    return [path.with_suffix(".py")] if path.with_suffix(".py").exists() else []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, here: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import in the file: `import a.b`, `from a import b` (as a.b too,
    b may be a module), relative imports resolved against the file's package (`here`: the file's
    module name, by default from its place under the repository)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = here or _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names]
    return out


def _presentation(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_every_module_is_core_or_presentation():
    """A new module under rubinperf/ is classified here, so that it cannot escape the check."""
    unknown = _top_level() - set(CORE) - set(PRESENTATION)
    assert not unknown, f"classify {sorted(unknown)} in CORE or PRESENTATION (tests/test_layers.py)"
    gone = [n for n in CORE + PRESENTATION if not _files(n)]
    assert not gone, f"listed but not in rubinperf/: {gone}"


@pytest.mark.parametrize("name", CORE)
def test_core_never_imports_presentation(name):
    bad = [f"{path.relative_to(REPO)}:{line}: imports {mod}"
           for path in _files(name) for line, mod in imports_of(path) if _presentation(mod)]
    assert not bad, "\n".join(bad)


def test_the_walk_sees_every_form_of_import(tmp_path):
    """The checker itself: each way of importing presentation is found (and core imports are not)."""
    probe = tmp_path / "probe.py"   # read as if it were rubinperf/specs/probe.py, for the relative imports
    probe.write_text("import rubinperf.render.tables\nfrom rubinperf import cli\nfrom rubinperf.cli import options\n"
                     "def f():\n    from ..render import plots\n    from .. import entry\n"
                     "from rubinperf import units, files\nfrom . import loader\n")
    found = [m for _, m in imports_of(probe, "rubinperf.specs.probe") if _presentation(m)]
    assert found == ["rubinperf.render.tables", "rubinperf.cli", "rubinperf.cli", "rubinperf.cli.options",
                     "rubinperf.render", "rubinperf.render.plots", "rubinperf.entry"]


def test_importing_the_whole_core_loads_no_presentation():
    mods = sorted({_module_name(p) for n in CORE for p in _files(n)})
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            f"print([m for m in sys.modules if m.startswith({FORBIDDEN!r})])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
