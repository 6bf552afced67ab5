"""Build hook: ship the top-level spec folders inside the wheel as package data.

The folders named in rubinperf/bundled.py (SPEC_FOLDERS) stay the single source; build_py
copies them into build/lib/rubinperf/_data/ so a wheel (or `pip install .`) carries them.
An editable install skips the copy and reads the folders of the checkout instead.
Metadata lives in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
_ns: dict = {"__file__": str(ROOT / "rubinperf" / "bundled.py"), "__name__": "rubinperf_bundled"}
exec(compile((ROOT / "rubinperf" / "bundled.py").read_text(), "rubinperf/bundled.py", "exec"), _ns)
SPEC_FOLDERS, DATA_DIR, NOT_SHIPPED = _ns["SPEC_FOLDERS"], _ns["DATA_DIR"], _ns["NOT_SHIPPED"]


class build_py_with_specs(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "rubinperf" / DATA_DIR
        if target.exists():
            shutil.rmtree(target)
        copied = 0
        for name in SPEC_FOLDERS:
            src = ROOT / name
            if src.is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*", *NOT_SHIPPED)
                shutil.copytree(src, target / name, ignore=ignore)
                copied += sum(1 for _ in (target / name).rglob("*.toml"))
        if not copied:
            raise SystemExit(f"setup.py: no spec files found in {', '.join(SPEC_FOLDERS)} under {ROOT}")


setup(cmdclass={"build_py": build_py_with_specs})
