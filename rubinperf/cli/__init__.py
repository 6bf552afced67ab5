"""The command line: thin. Each command parses its options, calls the core and hands the records to
rubinperf.render; one module per command group (kernel, estimate, explain, serving, validate, lists,
calibrate), options shared by several commands declared once in rubinperf.cli.options.

This module holds the root group, the order commands are listed in, and `main`: every error a
user can cause ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Annotated


def _import_typer():
    """typer, imported as if rich were not installed.

    rubinperf's help and usage errors are click's plain text (rich_markup_mode=None, and
    typer.core.rich = None below), and its tracebacks are off, so typer never uses
    typer.rich_utils; yet typer.core and typer.main import it, with rich.markdown,
    markdown_it, rich.traceback and pygments: about half of the start-up of every command.
    typer supports running without rich (its ImportError fallbacks set rich = None), which is
    exactly what rubinperf asks for. rich itself is unaffected: hidden only while typer's
    modules load, and imported by rubinperf's tables as usual. A typer imported earlier (by
    another module of the process) is used as it is."""
    if "typer" in sys.modules:
        return sys.modules["typer"]
    missing = object()
    saved = sys.modules.get("rich", missing)
    sys.modules["rich"] = None  # `import rich` inside typer raises ImportError
    try:
        import typer
    finally:
        if saved is missing:
            del sys.modules["rich"]
        else:
            sys.modules["rich"] = saved
    return typer


typer = _import_typer()

from rubinperf.cli.options import apply_wide  # noqa: E402
from rubinperf.errors import SpecError  # noqa: E402

# typer escapes '[' in help texts for rich markup whenever rich is importable, even with markup
# off (rich_markup_mode=None), so plain help would read '\[default: 1024]'. Help is plain here
# (already so when typer was imported by _import_typer; this covers a typer imported before).
typer.core.rich = None
typer.main.rich = None

app = typer.Typer(
    name="rubinperf",
    help="Analytical roofline performance of MoE model serving on rack-scale GPU systems.\n\n"
    "Example: rubinperf estimate --hardware vr-nvl72 --layout dep32 --breakdown",
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def _version(value: bool):
    if value:
        from rubinperf import __version__

        typer.echo(f"rubinperf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
):
    """Analytical roofline performance of MoE model serving on rack-scale GPU systems."""


# ---------------------------------------------------------------- the commands, in the order --help lists them
# (each module is light at import: the core, the renderers, numpy, sympy and matplotlib load inside the commands)

from rubinperf.cli import calibrate as _calibrate  # noqa: E402
from rubinperf.cli import estimate as _estimate  # noqa: E402
from rubinperf.cli import explain as _explain  # noqa: E402
from rubinperf.cli import kernel as _kernel  # noqa: E402
from rubinperf.cli import lists as _lists  # noqa: E402
from rubinperf.cli import model as _model  # noqa: E402
from rubinperf.cli import report as _report  # noqa: E402
from rubinperf.cli import serving as _serving  # noqa: E402
from rubinperf.cli import serve as _serve  # noqa: E402
from rubinperf.cli import validate as _validate  # noqa: E402

app.add_typer(_kernel.kernel_app, name="kernel")
app.add_typer(_lists.list_app, name="list")
app.add_typer(_model.model_app, name="model")
app.command("estimate")(_estimate.estimate)
app.command("explain")(_explain.explain)
app.command("sensitivity")(_explain.sensitivity)
app.command("pareto")(_serving.pareto)
app.command("compare")(_serving.compare)
app.command("serve")(_serve.serve)
app.command("report")(_report.report)
app.command("validate")(_validate.validate_cmd)
app.command("calibrate")(_calibrate.calibrate)


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error becomes one line on stderr and exit status 2.

    Ctrl-C (SIGINT) and SIGTERM unwind the stack (a file half written is removed) and end
    with one line and status 130 (143). A failed write to standard output (a full disk, a
    closed pipe) is one line too. The click exceptions are matched by name: typer ships
    click itself in some versions.
    """
    from rubinperf.render.console import make_streams_safe

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["--help"]
    make_streams_safe()
    apply_wide(False)  # each run starts compact; --wide is per command
    # numpy's floating-point warnings are not for users: results are checked for finiteness instead.
    warnings.filterwarnings("ignore", message=r"(overflow|divide by zero|invalid value|underflow) encountered",
                            category=RuntimeWarning)
    with _signals_unwind():
        try:
            try:
                code = _run(argv)
            finally:
                _stop_progress()
            _flush_stdout()
            return code
        except _Signal as sig:
            _fail(sig.message, sig.status)
        except KeyboardInterrupt:
            _fail("rubinperf: interrupted", 130)
    return 2  # pragma: no cover


def _click_command(argv: list[str]):
    """The click group for this run. typer builds a click command from each function's signature
    on every run (about 20 ms for all of rubinperf's); when the first word is a command (or a
    command group), only that one is built (_command_named): its help, errors and behaviour are the same."""
    import copy

    name = _command_named(argv)
    if name is None:
        return typer.main.get_command(app)
    lite = copy.copy(app)
    lite.registered_commands = [c for c in app.registered_commands if _name_of(c) == name]
    lite.registered_groups = [g for g in app.registered_groups if g.name == name]
    return typer.main.get_command(lite)


def _command_named(argv: list[str]) -> str | None:
    """The command (or command group) alone that _click_command builds for a command line: its first word, where
    that names one; None where the whole group is built (no command, group options, a misspelt name, shell
    completion). Two command lines of the same answer get the same click command."""
    name = argv[0] if argv else ""
    if name.startswith("-") or any(k.startswith("_RUBINPERF_COMPLETE") for k in os.environ):
        return None
    if any(_name_of(c) == name for c in app.registered_commands) or any(g.name == name for g in app.registered_groups):
        return name
    return None


def _name_of(command) -> str:
    return command.name or typer.main.get_command_name(command.callback.__name__)


# Commands that can work for more than a moment: a spinner on a terminal's stderr while they do (never with --json,
# --csv or --quiet, never for --help).
SLOW_COMMANDS = frozenset({"validate", "report", "explain", "sensitivity", "calibrate", "compare", "pareto", "serve",
                           "model"})
QUIET_FLAGS = frozenset({"--json", "--csv", "--quiet", "-q", "--help", "-h"})


def _start_progress(argv: list[str]) -> None:
    if not argv or argv[0] not in SLOW_COMMANDS or QUIET_FLAGS.intersection(argv):
        return
    if not sys.stderr.isatty():   # the spinner's module is not even imported then
        return
    from rubinperf.render.progress import start_working

    start_working(f"rubinperf {argv[0]}")


def _run(argv: list[str]) -> int:
    from rubinperf.cli.options import set_command_line

    set_command_line(argv)
    command = _click_command(argv)
    _start_progress(argv)
    try:
        rv = command.main(args=argv, prog_name="rubinperf", standalone_mode=False)
        if rv == 130:  # typer turns a KeyboardInterrupt into a silent exit code 130; no command returns it
            _fail("rubinperf: interrupted", 130)
        return rv if isinstance(rv, int) else 0
    except SpecError as exc:
        _fail(f"rubinperf: error: {exc}")
    except BrokenPipeError:
        from rubinperf.render.console import silence_stdout

        silence_stdout()
        return 0
    except (KeyboardInterrupt, _Signal):
        raise
    except SystemExit:
        raise
    except RecursionError:
        _fail("rubinperf: error: the input is nested too deeply")
    except OSError as exc:  # a file or stream the user pointed at: name it
        doing = "cannot install shell completion: " if "--install-completion" in argv else ""
        _fail(f"rubinperf: error: {doing}{_os_error(exc)}")
    except Exception as exc:  # never a traceback for users
        kind = type(exc).__name__
        if _RECEIVED or _interrupted(exc):  # a module half imported when Ctrl-C came fails later as ImportError
            raise _Signal(_RECEIVED[0] if _RECEIVED else 2) from None
        if kind == "Exit":
            return getattr(exc, "exit_code", 0)
        if kind == "Abort":
            if isinstance(exc.__context__, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt):
                _fail("rubinperf: interrupted", 130)
            _fail("rubinperf: aborted")
        if hasattr(exc, "format_message"):
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else "rubinperf: "
            _fail(where + "error: " + exc.format_message() + _did_you_mean(exc, ctx))
        _fail(f"rubinperf: internal error: {kind}: {exc}")
    return 2  # pragma: no cover


def _interrupted(exc: BaseException) -> bool:
    """An exception raised while a signal or Ctrl-C unwound the stack (its cause or context chain holds one)."""
    seen = 0
    while exc is not None and seen < 50:
        if isinstance(exc, (KeyboardInterrupt, _Signal)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _did_you_mean(exc, ctx) -> str:
    """' Did you mean estimate?' for a misspelt command or subcommand ('' otherwise, or when click said it)."""
    import difflib

    message = exc.format_message()
    if ctx is None or not message.startswith("No such command") or "Did you mean" in message:
        return ""
    typed = message.split("'")[1] if message.count("'") >= 2 else ""
    names = ctx.command.list_commands(ctx) if hasattr(ctx.command, "list_commands") else []
    near = difflib.get_close_matches(typed.lower(), names, n=3, cutoff=0.5)
    near = near or [n for n in names if typed and (n.startswith(typed.lower()) or typed.lower().startswith(n))]
    if not near:
        return f" Commands: {', '.join(names)}." if names else ""
    return f" Did you mean {' or '.join(near)}?"


def _os_error(exc: OSError) -> str:
    from rubinperf.errors import shorten

    what = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{shorten(str(exc.filename))}: {what}"
    return f"cannot read or write a file: {what}"


def _flush_stdout() -> None:
    """Output is flushed here, not at exit, so that a full disk or a closed pipe is one line."""
    from rubinperf.render.console import silence_stdout

    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as exc:
        silence_stdout()
        _fail(f"rubinperf: error: cannot write to standard output: {exc.strerror or exc}")
    except ValueError:  # a closed stream
        pass


class _Signal(BaseException):
    """SIGINT or SIGTERM during a command: not an Exception, so nothing on the way swallows it."""

    def __init__(self, signum: int):
        from rubinperf.errors import MESSAGES, exit_status

        super().__init__(signum)
        self.message = MESSAGES.get(signum, "rubinperf: interrupted")
        self.status = exit_status(signum)


_RECEIVED: list[int] = []   # signals received during the run: an error after one is the signal's doing


def _raise_signal(signum, frame):
    import signal

    _RECEIVED.append(signum)
    for s in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not interrupt the clean-up
        signal.signal(s, signal.SIG_IGN)
    raise _Signal(signum)


class _signals_unwind:
    """SIGINT/SIGTERM raise _Signal while a command runs (main thread only); restored after."""

    def __enter__(self):
        import signal
        import threading

        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old = signal.getsignal(s)
                if old is not None:
                    self.saved[s] = old
                    signal.signal(s, _raise_signal)
        return self

    def __exit__(self, *exc):
        import signal

        for s, old in self.saved.items():
            signal.signal(s, old)
        return False


def _stop_progress() -> None:
    progress = sys.modules.get("rubinperf.render.progress")
    if progress is not None:
        progress.stop_working()


def _fail(msg: str, status: int = 2):
    from rubinperf.errors import shorten

    _stop_progress()

    from rubinperf.render.console import silence_stdout

    try:
        sys.stdout.flush()  # what was printed before the error goes first (and a full disk is not a second error)
    except (OSError, ValueError):
        silence_stdout()
    sys.stderr.write(shorten(" ".join(str(msg).split()), 1000) + "\n")
    raise SystemExit(status)


if __name__ == "__main__":
    raise SystemExit(main())
