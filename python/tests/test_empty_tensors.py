# SPDX-License-Identifier: Apache-2.0
"""Empty tensors: read-only exactly when NumPy makes them read-only.

A tensor with no memory at all (data NULL, zero elements: torch's and
pyarrow's empties) comes out writable, whatever its flags or form said,
because NumPy, which cannot view NULL, makes a writable array of its own for
it; an empty tensor whose data is not NULL keeps the usual rules
(docs/impl/python.md, "Read-only memory: never more writable than the
source"). NumPy is the oracle: every case is compared with what
np.from_dlpack makes of the same producer.
"""

from typing import Any, Tuple

import numpy as np
import pytest

import hurray

from conftest import CountingProducer, versioned_tensor_of

READ_ONLY = 1


class EmptyProducer:
    """A versioned producer of a float64 vector of `n` elements, with the
    given flags, whose data pointer is NULL when `null` is set."""

    def __init__(self, n: int, flags: int, null: bool) -> None:
        self.p = CountingProducer(n=max(n, 1), flags=flags)
        self.p.shape[0] = n
        self.null = null

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        cap = self.p.capsule()
        if self.null:
            versioned_tensor_of(cap).dl_tensor.data = None
        return cap

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)


CASES = [
    (0, READ_ONLY, True),  # pyarrow's empty array
    (0, 0, True),  # torch's empty tensor
    (0, READ_ONLY, False),  # an empty read-only NumPy array: stays read-only
    (0, 0, False),
    (3, READ_ONLY, False),
    (3, 0, False),
]


@pytest.mark.parametrize("n,flags,null", CASES)
def test_read_only_exactly_when_numpy_says(n: int, flags: int, null: bool) -> None:
    want_writable = np.from_dlpack(EmptyProducer(n, flags, null)).flags.writeable
    buf = hurray.from_dlpack(EmptyProducer(n, flags, null))
    assert buf.readonly == (not want_writable)
    assert np.from_dlpack(buf).flags.writeable == want_writable
    assert buf.shape == (n,)


def test_an_empty_tensor_without_memory_reaches_a_legacy_consumer() -> None:
    """A read-only Buffer is refused to a legacy consumer (it cannot be told);
    an empty one without memory is not read-only, so it goes through."""
    buf = hurray.from_dlpack(EmptyProducer(0, READ_ONLY, True))
    cap = buf.__dlpack__()  # no max_version: a legacy capsule, as JAX asks
    assert cap is not None
    with pytest.raises(BufferError, match="read-only"):
        hurray.from_dlpack(EmptyProducer(3, READ_ONLY, False)).__dlpack__()


def test_the_producer_is_released_once() -> None:
    prod = EmptyProducer(0, READ_ONLY, True)
    buf = hurray.from_dlpack(prod)
    a, b = buf.share(2)
    del buf, a
    assert prod.p.deleted == 0
    del b
    assert prod.p.deleted == 1


def test_pyarrow_empty_array_reaches_jax_as_it_does_directly() -> None:
    pa: Any = pytest.importorskip("pyarrow", reason="pyarrow cannot be imported")
    jax: Any = pytest.importorskip("jax", reason="jax cannot be imported")
    jax.config.update("jax_platforms", "cpu")
    empty = pa.array([], pa.float32())
    direct = jax.numpy.from_dlpack(empty)
    through = jax.numpy.from_dlpack(hurray.from_dlpack(empty))
    assert through.shape == direct.shape == (0,)
    assert not hurray.from_dlpack(empty).readonly
    assert hurray.from_dlpack(pa.array([1.0], pa.float32())).readonly  # not empty: as before


def test_torch_empty_tensor_is_writable_as_numpy_makes_it() -> None:
    torch: Any = pytest.importorskip("torch", reason="torch cannot be imported")
    t = torch.empty(0)
    assert np.from_dlpack(t).flags.writeable
    assert not hurray.from_dlpack(t).readonly
