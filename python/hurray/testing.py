# SPDX-License-Identifier: Apache-2.0
"""Test helpers: fail a test that leaks libhurray handles (docs/impl/python.md §9).

    import hurray.testing

    def test_no_leak():
        with hurray.testing.no_leaks():
            buf = hurray.empty(4)
            del buf

A pytest fixture doing this for every test is in examples/pytest_leak_check/.
"""

import contextlib
from typing import Iterator, List

from ._check import LiveHandle, check_leaks, check_mark, checking_enabled, enable_checking


def format_leaks(leaks: List[LiveHandle]) -> str:
    """One paragraph per leaked handle: what made it and where."""
    lines = [f"{len(leaks)} hurray handle(s) leaked:"]
    for h in leaks:
        lines.append(
            f"  handle #{h.id} made by {h.made_by} on device {h.device}, ndim {h.ndim}"
            + (f", at {h.site}" if h.site else "")
        )
        lines.extend("      " + f for f in h.origin.splitlines())
    return "\n".join(lines)


@contextlib.contextmanager
def no_leaks() -> Iterator[None]:
    """Raise AssertionError if handles made inside the block are still live after it.

    Turns the checking mode on if it is off.
    """
    if not checking_enabled():
        enable_checking()
    mark = check_mark()
    yield
    leaks = check_leaks(mark)
    if leaks:
        raise AssertionError(format_leaks(leaks))
