"""The README's console examples: each ```console block holds `$ rubinperf ...` commands, each
followed by the output it prints.

    python scripts/readme_examples.py            # check: list the examples whose output moved
    python scripts/readme_examples.py --write    # rewrite each example's output as the tool prints it now

A command runs as a user types it, from the repository root, in a fresh process, with
COLUMNS=100 (the width the examples are made for) unless it starts with `COLUMNS=N`.
Only trailing spaces are normalised. tests/package/test_readme.py runs the check.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
COLUMNS = 100
BLOCK = re.compile(r"^```console\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Example:
    command: str          # as printed after "$ "
    shown: str            # the output printed under it in the README
    start: int            # character offsets of the output in the README text
    end: int


def examples(text: str) -> list[Example]:
    """Every `$ ` command of every console block, with the output shown under it."""
    out = []
    for block in BLOCK.finditer(text):
        body, base = block.group(1), block.start(1)
        starts = [m.start() for m in re.finditer(r"^\$ ", body, re.M)]
        if not starts or starts[0] != 0:
            raise ValueError(f"README console block at offset {base} does not start with '$ '")
        for i, s in enumerate(starts):
            line_end = body.index("\n", s) + 1
            stop = starts[i + 1] if i + 1 < len(starts) else len(body)
            out.append(Example(body[s + 2:line_end - 1], body[line_end:stop], base + line_end, base + stop))
    return out


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"


def run(command: str) -> str:
    """What `command` prints (stdout, then stderr), run as the README says."""
    words = shlex.split(command)
    columns = COLUMNS
    if words and words[0].startswith("COLUMNS="):
        columns = int(words.pop(0).split("=", 1)[1])
    if not words or words[0] != "rubinperf":
        raise ValueError(f"README console command is not a rubinperf command: {command!r}")
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("LINES", None)
    proc = subprocess.run([sys.executable, "-m", "rubinperf", *words[1:]], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)
    return normalise(proc.stdout + proc.stderr)


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    moved = []
    for ex in reversed(examples(text)):   # from the end, so earlier offsets stay valid
        now = run(ex.command)
        if now != normalise(ex.shown):
            moved.append(ex.command)
            text = text[:ex.start] + now + text[ex.end:]
    for command in reversed(moved):
        print(f"output moved: $ {command}")
    if "--write" in argv and moved:
        README.write_text(text, encoding="utf-8")
        print(f"rewrote {len(moved)} example(s) in README.md")
    return 1 if moved and "--write" not in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
