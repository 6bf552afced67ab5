"""One direction: each stage of the pipeline imports only itself and the stages before it.

specs -> kernels -> roofline -> step -> serving -> calibrate -> analysis -> render -> cli: every
import statement of every module is read from its source (imports inside functions too, relative
ones resolved), so an import that runs only on some path is caught as well. The base modules
(errors, units, mathops, files, bundled) are neutral ground every stage may use. No module
imports itself back through another (no circles). A Cost, Kernel or KernelTime is constructed in
kernels/ and roofline.py only; everywhere else they come from the kernel functions and the roofline.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PKG = REPO / "rubinperf"

# The stages in pipeline order: the names directly under rubinperf/ (modules without .py, packages).
STAGES = (
    ("base", ("__init__", "errors", "units", "mathops", "files", "bundled", "kept")),
    ("specs", ("specs",)),
    ("kernels", ("kernels",)),
    ("roofline", ("roofline",)),
    ("step", ("step",)),
    ("serving", ("serving",)),
    ("calibrate", ("calibrate",)),
    ("analysis", ("analysis",)),
    ("render", ("render",)),
    ("cli", ("cli", "entry", "__main__")),
)
RANK = {name: rank for rank, (_, names) in enumerate(STAGES) for name in names}
STAGE_OF = {name: stage for stage, names in STAGES for name in names}
# Presentation: what the core (every stage before render) must not import.
PRESENTATION = ("render", "cli", "entry", "__main__")
FORBIDDEN = tuple(f"rubinperf.{name}" for name in PRESENTATION)
CORE = tuple(name for name in RANK if name not in PRESENTATION)


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


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once for the checks below that only read it (the stages' files are read by
    several tests: parsing them again in each was most of this file's CPU time)."""
    return ast.parse(path.read_text(), filename=str(path))


def imports_of(path: Path, here: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import in the file: `import a.b`, `from a import b` (as a.b too,
    b may be a module), relative imports resolved against the file's package (`here`: the file's
    module name, by default from its place under the repository). Worked out once per file and name."""
    return list(_imports_of(path, here))


@functools.lru_cache(maxsize=None)
def _imports_of(path: Path, here: str | None) -> tuple[tuple[int, str], ...]:
    tree = ast.parse(path.read_text(), filename=str(path))   # its own tree: the walk below empties TYPE_CHECKING
    for node in ast.walk(tree):   # `if TYPE_CHECKING:` imports never run (annotations only): not imports
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
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
    return tuple(out)


def _presentation(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


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


def _top(module: str) -> str | None:
    """The name under rubinperf/ a module belongs to ('step' for rubinperf.step.graph), None outside."""
    parts = module.split(".")
    if parts[0] != "rubinperf":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_stage():
    """A new module under rubinperf/ is placed in a stage here, so that it cannot escape the checks."""
    unknown = _top_level() - set(RANK)
    assert not unknown, f"place {sorted(unknown)} in a stage (tests/package/test_layers.py)"
    gone = [n for n in RANK if not _files(n)]
    assert not gone, f"listed but not in rubinperf/: {gone}"


@pytest.mark.parametrize("name", list(RANK))
def test_a_stage_imports_only_itself_and_earlier_stages(name):
    later = []
    for path in _files(name):
        for line, mod in imports_of(path):
            top = _top(mod)
            if top in RANK and RANK[top] > RANK[name]:
                later.append(f"{path.relative_to(REPO)}:{line}: {STAGE_OF[name]} imports {mod} ({STAGE_OF[top]})")
    assert not later, "\n".join(later)


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for n in RANK for p in _files(n)}
    graph = {}
    for mod, path in modules.items():
        deps = set()
        for _, name in imports_of(path):
            while name and name not in modules:   # `from a.b import c`: a.b.c if a module, else a.b
                name = name.rpartition(".")[0]
            if name and name != mod and not mod.startswith(name + "."):
                deps.add(name)
        graph[mod] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


BORN = {"Cost": "kernels", "Kernel": "kernels", "KernelTime": "roofline"}


def _constructions(path: Path) -> list[tuple[int, str]]:
    """(line, class) of every call `Cost(...)`, `Kernel(...)`, `KernelTime(...)`, and of every `type(x)(...)` (a
    record made by whatever class x has: "self's class"; generic code makes records through the class's own methods,
    e.g. `map`, written in the class's module)."""
    out = []
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in BORN:
            out.append((node.lineno, f.id))
        elif isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "type":
            out.append((node.lineno, "self's class"))
    return out


def _born_outside(path: Path, stage: str) -> list[str]:
    """Constructions in `path` (of stage `stage`) of a class born elsewhere, and any made by self's class."""
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    return [f"{shown}:{line}: {cls}(...) outside {BORN.get(cls, 'its own class')}"
            for line, cls in _constructions(path) if BORN.get(cls) != stage]


@pytest.mark.parametrize("name", list(RANK))
def test_costs_are_born_in_kernels_and_times_in_the_roofline(name):
    bad = [msg for path in _files(name) for msg in _born_outside(path, name)]
    assert not bad, "\n".join(bad)


def test_the_constructor_walk_sees_self_made_records(tmp_path):
    code = tmp_path / "x.py"
    code.write_text("def f(self, c):\n    a = KernelTime(1)\n    b = type(self)(2)\n    return Cost(), c\n")
    assert _born_outside(code, "kernels") == ["x.py:2: KernelTime(...) outside roofline",
                                              "x.py:3: self's class(...) outside its own class"]
    assert _born_outside(code, "roofline") == ["x.py:3: self's class(...) outside its own class",
                                               "x.py:4: Cost(...) outside kernels"]


def test_time_is_computed_only_in_the_roofline():
    """kernel_time is the one door to time: no stage builds a KernelTime, and only the roofline defines it."""
    defined = [f"{path.relative_to(REPO)}" for n in RANK for path in _files(n)
               if any(isinstance(node, ast.ClassDef) and node.name == "KernelTime"
                      for node in ast.walk(_tree(path)))]
    assert defined == ["rubinperf/roofline.py"]
