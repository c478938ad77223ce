"""Two tests under the fixture of conftest.py: one clean, one that leaks."""
import numpy as np

import hurray

kept = []


def test_clean():
    b1, b2 = hurray.from_dlpack(np.arange(4.0)).share(2)
    assert np.from_dlpack(b1).sum() == 6.0
    del b1, b2


def test_leaks_a_buffer():
    kept.append(hurray.empty(3))  # still referenced after the test: a leak
