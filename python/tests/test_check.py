# SPDX-License-Identifier: Apache-2.0
"""The checking mode from Python (docs/impl/python.md §8).

Turning the mode on is process-wide, so the tests that need it from the
environment run in a subprocess; the in-process ones turn it off again
(handles tracked meanwhile stay checked, which is harmless).
"""

import gc
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Iterator

import numpy as np
import pytest

import hurray
import hurray.testing

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def checking() -> Iterator[None]:
    was = hurray.checking_enabled()
    hurray.enable_checking()
    try:
        yield
    finally:
        if not was:
            hurray.disable_checking()


def run_python(code: str, **env: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_environment_turns_it_on_at_import() -> None:
    r = run_python("import hurray; print(hurray.checking_enabled())", HURRAY_CHECK="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
    r = run_python("import hurray; print(hurray.checking_enabled())", HURRAY_CHECK="0")
    assert r.stdout.strip() == "False"


def test_a_live_buffer_is_listed_with_its_python_line(checking: None) -> None:
    mark = hurray.check_mark()
    line = sys._getframe().f_lineno + 1  # the line of the next statement
    buf = hurray.empty((2, 3))
    leaks = hurray.check_leaks(mark)
    assert [h.made_by for h in leaks] == ["hurray_alloc"]
    assert leaks[0].id == mark
    assert leaks[0].device == (1, 0) and leaks[0].ndim == 2
    assert (
        leaks[0].site == f"{__file__}:{line} in test_a_live_buffer_is_listed_with_its_python_line"
    )
    del buf
    assert hurray.check_leaks(mark) == []


def test_imported_and_shared_buffers_are_tracked_until_released(checking: None) -> None:
    mark = hurray.check_mark()
    a = np.arange(6, dtype=np.float32)
    src_line = sys._getframe().f_lineno + 1  # the line of the next statement
    src = hurray.from_dlpack(a)
    b1, b2 = src.share(2)
    live = hurray.check_leaks(mark)
    # The share consumed the import; src keeps one of three shares (with the
    # line src was made on), b1 and b2 have the line of the share.
    assert sorted(h.made_by for h in live) == ["hurray_share"] * 3
    name = "test_imported_and_shared_buffers_are_tracked_until_released"
    assert sorted(h.site for h in live) == sorted(
        f"{__file__}:{n} in {name}" for n in (src_line, src_line + 1, src_line + 1)
    ), live
    del src, b1
    assert [h.made_by for h in hurray.check_leaks(mark)] == ["hurray_share"]
    del b2
    assert hurray.check_leaks(mark) == []


def test_a_buffer_keeps_its_python_line_after_an_export(checking: None) -> None:
    mark = hurray.check_mark()
    line = sys._getframe().f_lineno + 1  # the line of the next statement
    b = hurray.empty(5)
    view = np.from_dlpack(b)
    leaks = hurray.check_leaks(mark)
    assert len(leaks) == 1 and leaks[0].made_by == "hurray_share"  # b's kept share
    assert f"test_check.py:{line} in " in leaks[0].site, leaks
    del b, view
    assert hurray.check_leaks(mark) == []


def test_an_imported_buffer_alive_at_exit_is_no_leak_report() -> None:
    # The producer's deleter is skipped at shutdown (python.md §3), but the
    # handle itself was released: the checker has nothing live.
    r = run_python(
        """
        import numpy as np, hurray
        b = hurray.from_dlpack(np.arange(3.0))
        """,
        HURRAY_CHECK="stderr",
    )
    assert r.returncode == 0, r.stderr
    assert "leak:" not in r.stderr, r.stderr
    assert "hurray check: 0 handle(s) still live at exit" in r.stderr, r.stderr


def test_swapping_between_frameworks_releases_everything_once(checking: None) -> None:
    torch = pytest.importorskip("torch")
    mark = hurray.check_mark()
    doubles = hurray.double_releases()
    for _ in range(50):
        t = torch.arange(8, dtype=torch.float32)
        buf = hurray.from_dlpack(t)
        n = np.from_dlpack(buf)
        back = torch.from_dlpack(hurray.from_dlpack(n))
        assert back.data_ptr() == t.data_ptr()
        del t, buf, n, back
    gc.collect()
    assert hurray.check_leaks(mark) == []
    assert hurray.double_releases() == doubles


def test_no_leaks_fails_a_block_that_leaks(checking: None) -> None:
    kept = []
    with pytest.raises(
        AssertionError, match=r"1 hurray handle\(s\) leaked:\n  handle #\d+ made by hurray_alloc"
    ):
        with hurray.testing.no_leaks():
            kept.append(hurray.empty(4))
    kept.clear()
    with hurray.testing.no_leaks():
        b = hurray.empty(4)
        del b


def test_check_leaks_refuses_when_the_mode_is_off() -> None:
    r = run_python("""
        import hurray
        try:
            hurray.check_leaks()
        except RuntimeError as e:
            print("refused:", e)
        """)
    assert "refused: hurray.check_leaks: the checking mode is off" in r.stdout, r.stderr


def test_stderr_mode_prints_the_summary_at_exit() -> None:
    r = run_python(
        """
        import hurray
        b = hurray.empty(2)
        del b
        print("ok")
        """,
        HURRAY_CHECK="stderr",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert "hurray check: 0 handle(s) still live at exit, 0 double release(s) caught" in r.stderr


def test_the_pytest_fixture_example_fails_only_the_leaking_test(tmp_path: pathlib.Path) -> None:
    example = REPO / "examples" / "pytest_leak_check"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(example),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    # A fixture failing after the test reports as an error at teardown.
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_leaks_a_buffer" in out, out
    assert "handle #" in out and "made by hurray_alloc" in out, out
    assert "test_leak_example.py:" in out and "in test_leaks_a_buffer" in out, out


def test_a_label_cut_inside_a_character_is_listed(checking: None) -> None:
    # Labels keep 511 bytes: a long non-ASCII site is cut mid-character.
    mark = hurray.check_mark()
    name = "\u00e9" * 400  # 800 bytes of UTF-8
    ns: dict[str, object] = {}
    exec(compile("import hurray\nb = hurray.empty(2)\n", name + ".py", "exec"), ns)
    leaks = hurray.check_leaks(mark)
    assert len(leaks) == 1 and leaks[0].site.startswith("\u00e9" * 200), leaks
    del ns
    assert hurray.check_leaks(mark) == []
