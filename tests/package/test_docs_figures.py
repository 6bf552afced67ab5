"""docs/*.png are current: each was drawn by scripts/make_docs_figures.py together with a JSON of the
data it plots; this recomputes that data (no matplotlib needed) and fails when the figure is stale."""
import hashlib
import importlib.util
import sys
import json

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("make_docs_figures", REPO / "scripts" / "make_docs_figures.py")
figures = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = figures   # dataclasses look their module up
_spec.loader.exec_module(figures)


@pytest.mark.parametrize("name", sorted(figures.FIGURES))
def test_docs_figure_is_current(name):
    committed = json.loads((REPO / "docs" / f"{name}.json").read_text())
    png = (REPO / "docs" / f"{name}.png").read_bytes()
    assert hashlib.sha256(png).hexdigest() == committed["png_sha256"], (
        f"docs/{name}.png was not written with docs/{name}.json: run python scripts/make_docs_figures.py")
    now = figures.plotted_data(name)
    assert now["command"] == committed["command"]
    assert now["data"] == committed["data"], (
        f"docs/{name}.png is stale (its data moved): run python scripts/make_docs_figures.py")


def test_the_readme_shows_every_figure():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in figures.FIGURES:
        assert f"](docs/{name}.png)" in readme


def test_the_figure_data_rounds_to_six_digits():
    assert figures._round(0.010512856684937134) == 0.0105129
    assert figures._round(8e12) == 8e12 and figures._round("dep16") == "dep16" and figures._round(3) == 3
