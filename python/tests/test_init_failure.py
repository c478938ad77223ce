# SPDX-License-Identifier: Apache-2.0
"""Module init when libhurray fails: learn_export_deleters used to
release an uninitialised handle when its first hurray_alloc failed. An
LD_PRELOAD shim (aid/init_failure_shim.c) makes one libhurray call fail and
counts hurray_buffer_release calls."""

import os
import re
import subprocess
import sys
from typing import Tuple

import pytest

import hurray

from native_build import build

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="LD_PRELOAD interposition is tested on Linux"
)


def import_with_failure(spec: str) -> Tuple["subprocess.CompletedProcess[str]", int, int]:
    shim = build(
        "init_failure_shim.so",
        "init_failure_shim.c",
        python=False,
        link_hurray=False,
        extra=["-ldl"],
    )
    env = dict(
        os.environ,
        LD_PRELOAD=shim,
        HURRAY_SHIM_FAIL=spec,
        HURRAY_SHIM_LIB=hurray.get_library(),
        PYTHONFAULTHANDLER="1",
    )
    r = subprocess.run(
        [sys.executable, "-c", "import hurray"], capture_output=True, text=True, timeout=60, env=env
    )
    m = re.search(r"shim: releases=(\d+) live_releases=(\d+)", r.stderr)
    assert m, r
    return r, int(m.group(1)), int(m.group(2))


def test_shim_is_transparent_without_a_failure() -> None:
    r, releases, live = import_with_failure("none:0")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("spec", ["alloc:1", "alloc:2"])
def test_failed_alloc_releases_nothing(spec: str) -> None:
    r, releases, live = import_with_failure(spec)
    assert r.returncode == 1
    assert "MemoryError" in r.stderr and "hurray._native init (hurray_alloc)" in r.stderr
    assert "HURRAY_ERR_OUT_OF_MEMORY" in r.stderr
    # The handle of the failed alloc was never made: no release of it.
    assert releases == 0, r.stderr


@pytest.mark.parametrize(
    "spec,what", [("versioned:1", "hurray_to_dlpack_versioned"), ("legacy:1", "hurray_to_dlpack")]
)
def test_failed_export_releases_the_handle_once(spec: str, what: str) -> None:
    r, releases, live = import_with_failure(spec)
    assert r.returncode == 1
    assert f"hurray._native init ({what})" in r.stderr
    # The allocated handle is given back exactly once.
    assert (releases, live) == (1, 1), r.stderr
