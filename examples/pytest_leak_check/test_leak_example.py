# SPDX-License-Identifier: Apache-2.0
"""Two tests under the fixture of conftest.py: one clean, one that leaks."""

from typing import List

import numpy as np

import hurray

kept: List[hurray.Buffer] = []


def test_clean() -> None:
    b1, b2 = hurray.from_dlpack(np.arange(4.0)).share(2)
    assert np.from_dlpack(b1).sum() == 6.0
    del b1, b2


def test_leaks_a_buffer() -> None:
    kept.append(hurray.empty(3))  # still referenced after the test: a leak
