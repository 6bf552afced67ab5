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
    # numpy's OpenBLAS starts a thread per core on import, and they spin a while: about 0.1 s of CPU on every
    # command that imports numpy, for no work of rubinperf's (its numpy is elementwise; the one BLAS call, a
    # calibration's least squares over a few columns, runs on one thread at that size). A user's own setting stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from rubinperf.cli import main as run

    return run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
