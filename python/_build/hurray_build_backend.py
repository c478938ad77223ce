# SPDX-License-Identifier: Apache-2.0
"""The build backend of the hurray package: scikit-build-core, plus one step
for source distributions and one for the licence file.

python/CMakeLists.txt builds libhurray from the repository root (one level
up). A source distribution has no repository around it, so build_sdist first
copies the parts of the root the library's build needs (CMakeLists.txt,
cmake/, include/, src/ and the root's licence and README when present) into
python/hurray-src/, which the sdist then carries (sdist.include in
pyproject.toml) and which python/CMakeLists.txt and the version lookup use
when it exists (overrides with if.from-sdist). The copy is removed again
afterwards; a wheel built from a checkout never needs it.

The licence: pyproject.toml names `LICENSE` in `license-files` (PEP 639),
a path inside python/, while the file is the repository root's. When this
module is loaded in a checkout (by any hook: metadata, wheel, editable,
sdist), the root's LICENSE is copied to python/LICENSE (git-ignored), so
the wheel's .dist-info/licenses/LICENSE and the sdist both have it; an
unpacked sdist already carries the copy.
"""

import os
import shutil

from scikit_build_core import build as _skbuild
from scikit_build_core.build import *  # noqa: F401,F403  (the PEP 517/660 hooks)

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
_ROOT = os.path.dirname(_HERE)
_COPY = ["CMakeLists.txt", "cmake", "include", "src", "LICENSE", "README.md"]
_DEST = os.path.join(_HERE, "hurray-src")


def _copy_root():
    """Copies the root's sources into hurray-src/; False when there is no
    repository root around python/ (building from an unpacked sdist)."""
    if not os.path.isfile(os.path.join(_ROOT, "CMakeLists.txt")) or not os.path.isdir(
        os.path.join(_ROOT, "src")
    ):
        return False
    shutil.rmtree(_DEST, ignore_errors=True)
    os.makedirs(_DEST)
    for name in _COPY:
        src = os.path.join(_ROOT, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(_DEST, name))
        elif os.path.isfile(src):
            shutil.copy2(src, os.path.join(_DEST, name))
    return True


def _copy_license():
    """Copies the repository root's LICENSE to python/LICENSE when building
    from a checkout (and it differs); does nothing in an unpacked sdist."""
    src = os.path.join(_ROOT, "LICENSE")
    dest = os.path.join(_HERE, "LICENSE")
    if not (
        os.path.isfile(src)
        and os.path.isfile(os.path.join(_ROOT, "CMakeLists.txt"))
        and os.path.isdir(os.path.join(_ROOT, "src"))
    ):
        return
    with open(src, "rb") as f:
        text = f.read()
    if os.path.isfile(dest):
        with open(dest, "rb") as f:
            if f.read() == text:
                return
    with open(dest, "wb") as f:
        f.write(text)


_copy_license()


def build_sdist(sdist_directory, config_settings=None):  # noqa: F811
    copied = _copy_root()
    try:
        return _skbuild.build_sdist(sdist_directory, config_settings)
    finally:
        if copied:
            shutil.rmtree(_DEST, ignore_errors=True)
