"""It packages: `python -m build` makes a wheel, the wheel installs into a fresh venv (its
dependencies from PyPI), and an example runs from that install, not from the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def test_the_wheel_installs_and_runs(demo, tmp_path):
    dist = tmp_path / "dist"
    out = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(PROJECT)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    wheels = list(dist.glob("palisade_agent-*-py3-none-any.whl"))
    assert len(wheels) == 1, list(dist.iterdir())
    fresh = tmp_path / "fresh"
    # A venv without pip of its own, filled by this one's pip (`--python`): the same install,
    # without the 3 s of CPU that bootstrapping pip into every fresh venv costs.
    venv.EnvBuilder(with_pip=False).create(fresh)
    py = fresh / "bin" / "python"
    env = {k: v for k, v in demo.env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                          "--disable-pip-version-check", str(wheels[0])],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run([str(py), "-c", "import palisade_agent, pathlib; print(pathlib.Path(palisade_agent.__file__).parent)"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0 and str(fresh) in out.stdout, out.stdout + out.stderr
    assert (Path(out.stdout.strip()) / "py.typed").exists(), "typed"
    out = subprocess.run([str(py), str(PROJECT / "examples" / "leased_write.py")], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60)
    assert out.returncode == 0 and "verified" in out.stdout, out.stdout + out.stderr
