# SPDX-License-Identifier: Apache-2.0
"""Builds the tests' native helpers with the C compiler, against the
installed hurray package's headers and library (hurray.get_include(),
hurray.get_lib_dir()): the way a C extension in a user's venv would."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Dict, Sequence, Tuple

import hurray

HERE = os.path.dirname(os.path.abspath(__file__))
_CACHE: Dict[Tuple[str, str], str] = {}


def compiler() -> str:
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    return cc if shutil.which(cc) else "cc"


def build(
    name: str,
    source: str,
    *,
    python: bool = True,
    link_hurray: bool = True,
    extra: Sequence[str] = (),
) -> str:
    """Compiles tests/aid/<source> into a shared object `name` in a fresh
    temporary folder; returns the path of the shared object. Raises with the
    compiler's output on failure."""
    key = (name, source)
    if key in _CACHE:
        return _CACHE[key]
    out_dir = tempfile.mkdtemp(prefix="hurray-test-native-")
    out = os.path.join(out_dir, name)
    cmd = [compiler(), "-shared", "-fPIC", "-O1", "-pthread", "-I", hurray.get_include()]
    if python:
        cmd += ["-I", sysconfig.get_paths()["include"]]
    cmd += [os.path.join(HERE, "aid", source), "-o", out]
    if link_hurray:
        lib_dir = hurray.get_lib_dir()
        cmd += ["-L", lib_dir, "-lhurray", f"-Wl,-rpath,{lib_dir}"]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building {source} failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    _CACHE[key] = out
    return out


def build_test_aid() -> str:
    """The folder holding the importable hurray_test_aid module."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return os.path.dirname(build("hurray_test_aid" + suffix, "hurray_test_aid.c"))


if __name__ == "__main__":  # pragma: no cover - manual use
    print(build_test_aid(), file=sys.stderr)
