"""The spinner of slow commands (rubinperf.render.progress): only on a terminal, after a delay, cleared before output,
never with --json."""

from __future__ import annotations

import io
import time

import pytest

from rubinperf.render import progress


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def no_spinner_left():
    yield
    progress.stop_working()


def test_spinner_shows_after_the_delay_and_clears(monkeypatch):
    monkeypatch.setattr(progress, "SPINNER_DELAY_S", 0.0)
    term = FakeTerminal()
    assert progress.start_working("rubinperf validate", term)
    deadline = time.monotonic() + 5
    while "rubinperf validate" not in term.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "rubinperf validate" in term.getvalue()
    progress.stop_working()
    assert term.getvalue().endswith("\r\x1b[2K")        # the line is cleared
    written = term.getvalue()
    time.sleep(0.25)
    assert term.getvalue() == written                   # and nothing more is written after


def test_quick_work_shows_nothing():
    term = FakeTerminal()
    assert progress.start_working("rubinperf report", term)
    progress.stop_working()                             # well before SPINNER_DELAY_S
    time.sleep(0.05)
    assert term.getvalue() == ""


def test_not_a_terminal_writes_nothing(monkeypatch):
    monkeypatch.setattr(progress, "SPINNER_DELAY_S", 0.0)
    pipe = io.StringIO()
    assert not progress.start_working("rubinperf validate", pipe)
    time.sleep(0.05)
    assert pipe.getvalue() == ""


@pytest.mark.parametrize("argv, starts", [
    (["validate"], True), (["validate", "--json"], False), (["compare", "--csv"], False), (["report", "-q"], False),
    (["estimate"], False), (["explain", "--help"], False), (["sensitivity"], True),
])
def test_which_commands_spin(monkeypatch, argv, starts):
    import sys

    from rubinperf import cli

    started = []
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    monkeypatch.setattr(progress, "start_working", lambda what, stream=None: started.append(what) or True)
    cli._start_progress(argv)
    assert bool(started) == starts
