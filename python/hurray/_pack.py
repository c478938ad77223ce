# SPDX-License-Identifier: Apache-2.0
"""hurray.pack: a mapping of tensors into one tensor group with one copy
(docs/impl/python.md §12, "hurray.pack")."""

import re
from typing import Any, List, Mapping, TypeVar

from . import _native
from ._sets import BufferDict

K = TypeVar("K")


def _is_ml_dtype(dt: Any) -> bool:
    """Whether dt is one of ml_dtypes' NumPy dtypes (bfloat16, float8_*,
    int4, ...), which NumPy's DLPack export refuses."""
    return getattr(getattr(dt, "type", None), "__module__", None) == "ml_dtypes"


def pack(tensors: Mapping[K, Any], *, shared: bool = True) -> "BufferDict":
    """Copy a mapping of tensors into ONE allocation and return a
    :class:`BufferDict` of Buffers with the same keys, in the same order
    (it crosses multiprocessing as one message with two fds).

    ``tensors``: a torch ``state_dict()``, a dict of NumPy arrays, or any
    mapping whose values are DLPack producers (JAX, tvm_ffi, hurray Buffers,
    capsules) in CPU-readable memory. Each value is taken zero-copy with
    :func:`from_dlpack_many` (one pass, all or nothing), then copied once
    into a tensor group (:func:`empty_group`): each Buffer has its value's
    dtype and shape, compact row-major at a multiple of
    :data:`GROUP_ALIGNMENT` bytes. Non-contiguous values (a transpose, a
    slice with steps) are packed contiguous: their elements in row-major
    order, their strides those of a compact tensor. The copies are private
    and writable, also of read-only sources; ml_dtypes' one-element-per-byte
    sub-byte dtypes stay so. ``shared=True`` (the default) makes the group
    one memfd, so the whole dict crosses processes as one allocation.

    The memory is freed once, after the last of the Buffers (and of
    whatever was made from them) is gone. Errors: ``TypeError`` for a
    non-mapping; what :func:`from_dlpack_many` raises for a value (naming
    it); ``BufferError`` for a value in memory the CPU cannot read (copy it
    to the CPU first). Nothing stays allocated after an error.
    """
    if not isinstance(tensors, Mapping):
        raise TypeError(
            "hurray.pack: expected a mapping of tensors (a state_dict, a dict of arrays), "
            f"not {type(tensors).__name__}"
        )
    keys = list(tensors.keys())
    values = [tensors[k] for k in keys]
    # NumPy arrays of ml_dtypes' types (bfloat16, float8, int4, ...) have no
    # DLPack export: they come as unsigned integers of the same size, and
    # their members get the ml_dtypes dtype back.
    dtypes: List[Any] = [None] * len(values)
    for i, v in enumerate(values):
        if type(v).__module__ == "numpy" and _is_ml_dtype(getattr(v, "dtype", None)):
            dtypes[i] = v.dtype
            values[i] = v.view(f"u{v.dtype.itemsize}")
    try:
        srcs = _native.from_dlpack_many(values)
    except Exception as e:
        # from_dlpack_many names the value's place, objs[i]: say its key.
        where = re.search(r"objs\[(\d+)\]", " ".join([str(e), *getattr(e, "__notes__", [])]))
        if where is not None and hasattr(e, "add_note"):
            i = int(where.group(1))
            e.add_note(f"hurray.pack: objs[{i}] is the value of key {keys[i]!r}")
        raise
    try:
        packed = _native._pack(srcs, bool(shared), dtypes)
    finally:
        for s in srcs:
            s.release()
    return BufferDict(zip(keys, packed))
