"""Progress on standard error, only on a terminal: a transient bar for the sweeps of `pareto` and `compare`, and a
spinner for any command still working after a moment (`working`), cleared before anything is printed.

Never in --json, --csv or --quiet output, and never when standard error is not a terminal (a pipe, a file, a test):
the spinner writes nothing at all then.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

# The spinner shows only when a command is still working this long after it started (a quick command shows none).
SPINNER_DELAY_S = 0.8
_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ACTIVE: list["_Spinner"] = []


class _Spinner:
    def __init__(self, what: str, stream):
        self.what, self.stream = what, stream
        self.stop_event = threading.Event()
        self.shown = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._spin, daemon=True)

    def _spin(self):
        start = time.monotonic()
        if self.stop_event.wait(SPINNER_DELAY_S):
            return
        i = 0
        while not self.stop_event.is_set():
            with self.lock:
                if self.stop_event.is_set():
                    break
                self.stream.write(f"\r{_FRAMES[i % len(_FRAMES)]} {self.what} {time.monotonic() - start:.0f} s")
                self.stream.flush()
                self.shown = True
            i += 1
            self.stop_event.wait(0.1)

    def stop(self):
        with self.lock:
            self.stop_event.set()
            if self.shown:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self.shown = False


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def start_working(what: str, stream=None) -> bool:
    """Start a spinner reading '<what> N s' on standard error (a terminal only) that appears after SPINNER_DELAY_S;
    `stop_working` (or the first thing printed: rubinperf.render.output) clears it. True when one was started."""
    stream = sys.stderr if stream is None else stream
    if _ACTIVE or not _is_terminal(stream):
        return False
    spinner = _Spinner(what, stream)
    _ACTIVE.append(spinner)
    spinner.thread.start()
    return True


def stop_working() -> None:
    """Clear the spinner, if one runs (called before any output, and when the command ends)."""
    while _ACTIVE:
        _ACTIVE.pop().stop()


@contextlib.contextmanager
def progress_bar(what: str):
    """A bar that reads '<what> LABEL', gone when the work ends; yields tick(done, total, label)."""
    stop_working()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(what + " {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None)

        def tick(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

        yield tick
