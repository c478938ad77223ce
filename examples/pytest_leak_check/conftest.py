# SPDX-License-Identifier: Apache-2.0
"""A pytest fixture that fails any test leaking a hurray.Buffer.

Copy this conftest.py next to your tests. Every test then runs with
libhurray's checking mode on and fails if a handle it made is still live
after it (the garbage collector runs first), naming what made the handle
and the Python line that did.
"""

from typing import Iterator

import pytest

import hurray
import hurray.testing


@pytest.fixture(autouse=True)
def hurray_no_leaks() -> Iterator[None]:
    if not hurray.checking_enabled():
        hurray.enable_checking()
    mark = hurray.check_mark()
    yield
    leaks = hurray.check_leaks(mark)
    if leaks:
        pytest.fail(hurray.testing.format_leaks(leaks), pytrace=False)
