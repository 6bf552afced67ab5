"""The console script's entry point: `rubinperf` = entry.main.

It takes Ctrl-C (and SIGTERM) from the first moment: while the CLI's modules are being
imported there is nothing to clean up, so an interrupt then prints one line and exits
130 (143 for SIGTERM) at once. While a command runs, rubinperf.cli.main installs handlers
that unwind the stack instead (so a file half written is removed), and ends the same way.
"""

from __future__ import annotations

import os
import signal
import sys

from rubinperf.errors import MESSAGES, exit_status


def _now(signum, frame):  # pragma: no cover - exercised in a subprocess
    try:
        os.write(2, (MESSAGES.get(signum, "rubinperf: interrupted") + "\n").encode())
    finally:
        os._exit(exit_status(signum))


def main() -> int:
    for signum in MESSAGES:
        signal.signal(signum, _now)
    from rubinperf.cli import main as run

    return run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
