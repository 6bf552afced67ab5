"""A transient progress bar on standard error (rich) for the sweeps of `pareto` and `compare`."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def progress_bar(what: str):
    """A bar that reads '<what> LABEL', gone when the work ends; yields tick(done, total, label)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(what + " {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None)

        def tick(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

        yield tick
