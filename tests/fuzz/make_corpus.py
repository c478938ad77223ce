#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of tests/fuzz/dlpack_fuzz.cc into tests/fuzz/corpus/.

Each seed is one hostile (or well-formed) DLPack header plus the plan of what
the target does with it, encoded the way tests/fuzz/fuzz_input.h and
dlpack_fuzz.cc decode it (docs/impl/fuzzing.md, "Input format"). Run it after
changing the encoding or to add a seed:

    python3 tests/fuzz/make_corpus.py            # rewrites tests/fuzz/corpus/
    python3 tests/fuzz/make_corpus.py --check    # fails if corpus/ is stale

Seeds are named after what they exercise; none of them may crash the target.
"""

import argparse
import os
import struct
import sys

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# Must match FuzzInput::kEdges (fuzz_input.h), in order.
EDGES = [
    0,
    1,
    -1,
    INT64_MAX,
    INT64_MIN,
    INT64_MAX // 2,
    INT64_MAX // 4,
    INT64_MAX // 8,
    INT64_MAX // 8 + 1,
    INT64_MAX // 16,
    INT64_MAX // 255,
    -(2**62),
    -(2**60),
    2**31,
    2**31 - 1,
    2**32,
    2**32 + 1,
    2**62,
    -(2**62),
    2**61,
    3037000500,
    3037000499,
    2**20,
    65,
    64,
    -65,
    INT64_MAX - 1,
    INT64_MIN + 1,
]

# Must match kDtypes and kDeviceTypes (dlpack_fuzz.cc).
DTYPES = [
    (0, 1),
    (0, 2),
    (0, 4),
    (0, 8),
    (0, 16),
    (0, 32),
    (0, 64),
    (1, 1),
    (1, 4),
    (1, 8),
    (1, 64),
    (2, 16),
    (2, 32),
    (2, 64),
    (3, 8),
    (3, 24),
    (4, 16),
    (5, 64),
    (5, 128),
    (6, 8),
    (7, 8),
    (14, 8),
    (15, 6),
    (16, 6),
    (17, 4),
]
DEVICE_TYPES = [
    1,
    1,
    1,
    1,
    1,
    1,
    3,
    11,
    2,
    10,
    13,
    4,
    7,
    8,
    9,
    12,
    14,
    15,
    16,
    17,
    18,
    0,
    5,
    6,
    19,
    -1,
]

# Mode bits (byte 0).
LEGACY, NO_DELETER, SHAPE_NULL, STRIDES_NULL, DATA_NULL = 1, 2, 4, 8, 16
EXPORT_LEGACY, MUTATE, DROP = 32, 64, 128
# Plan byte (byte 1): bits 0-2 share-count index, bit 3 re-share, bits 4-6
# copy destination (0 none, 1-3 CPU 0, 4 CPU 1, 5 CUDA, 6 CUDA host, 7 type 99),
# bit 7 release the copy first.
SHARE = {1: 0, 2: 1, 3: 2, 5: 3, 0: 4, 4: 6, 2**32 + 1: 7}
RESHARE, COPY_FIRST = 8, 128
COPY_NONE, COPY_CPU, COPY_CPU1, COPY_CUDA, COPY_CUDA_HOST, COPY_99 = 0, 1, 4, 5, 6, 7

READ_ONLY, IS_COPIED, SUBBYTE_PADDED = 1, 2, 4


def value(v):
    """FuzzInput::value() encoding of the signed 64-bit integer v."""
    v = ((v + 2**63) % 2**64) - 2**63  # wrap like a cast to int64_t
    if -32 <= v <= 95:
        return bytes([v + 32])
    if v in EDGES:
        return bytes([0x80 + EDGES.index(v)])
    return bytes([0xF0]) + struct.pack("<q", v)


def seed(
    mode=0,
    share=1,
    reshare=False,
    copy=COPY_CPU,
    copy_first=False,
    order=0,
    fill=0,
    version=(1, 3),
    flags=0,
    device=(1, 0),
    dtype=(2, 32),
    lanes=1,
    ndim=None,
    shape=(),
    strides=None,
    byte_offset=0,
    options=0,
):
    if ndim is None:
        ndim = len(shape)
    if strides is None:
        strides = [0] * len(shape)
    plan = (
        SHARE[share] | (RESHARE if reshare else 0) | (copy << 4) | (COPY_FIRST if copy_first else 0)
    )
    out = bytes([mode, plan, order & 0xFF, fill & 0xFF])
    out += value(version[0]) + value(version[1]) + value(flags)
    if device[0] in DEVICE_TYPES:
        out += bytes([DEVICE_TYPES.index(device[0])])
    else:
        out += bytes([0xC0]) + value(device[0])
    out += value(device[1])
    if tuple(dtype) in DTYPES and lanes < 0x10000:
        out += bytes([DTYPES.index(tuple(dtype))])
        if lanes == 1:
            out += bytes([0])
        elif 2 <= lanes <= 48:
            out += bytes([0xC0 + lanes - 1])
        else:
            out += bytes([0xF0]) + struct.pack("<H", lanes)
    else:
        out += bytes([0xC0, dtype[0] & 0xFF, dtype[1] & 0xFF]) + struct.pack("<H", lanes & 0xFFFF)
    out += value(ndim) + value(byte_offset)
    out += bytes([options]) if options in (0, 1) else bytes([0xF0]) + value(options)
    for n, s in zip(shape, strides):
        out += value(n) + value(s)
    return out


def compact(shape):
    s, out = 1, []
    for n in reversed(shape):
        out.append(s)
        s *= max(n, 1)
    return list(reversed(out))


def seeds():
    c = compact
    yield "contiguous_f32_2x3", seed(shape=(2, 3), strides=c((2, 3)), share=3)
    yield "legacy_contiguous_f32_2x3", seed(mode=LEGACY, shape=(2, 3), strides=c((2, 3)), share=2)
    yield "transposed_copy", seed(shape=(3, 2), strides=(1, 3), copy_first=True)
    yield "negative_stride", seed(shape=(4,), strides=(-1,), byte_offset=12, share=2, order=1)
    yield (
        "negative_strides_3d",
        seed(
            dtype=(0, 16),
            shape=(2, 3, 4),
            strides=(-12, 4, -1),
            byte_offset=2 * 15,
            reshare=True,
            order=0x81,
        ),
    )
    yield "broadcast_stride0", seed(shape=(3, 1, 4), strides=(0, 7, 1), share=5)
    yield "zero_elements_null_data", seed(mode=DATA_NULL, shape=(0, 5), strides=(5, 1))
    yield "zero_elements_huge_extent", seed(shape=(0, INT64_MAX, 4), strides=(1, INT64_MAX, 3))
    yield "scalar_ndim0", seed(shape=(), share=4, mode=EXPORT_LEGACY)
    yield "scalar_null_arrays", seed(mode=SHAPE_NULL | STRIDES_NULL | LEGACY)
    yield "ndim_65", seed(ndim=65, shape=[1] * 65, strides=[1] * 65)
    yield "ndim_negative", seed(ndim=-1)
    yield "ndim_int32_min", seed(ndim=2**31)
    yield "ndim_64_ones", seed(ndim=64, shape=[1] * 64, strides=[INT64_MAX] * 64)
    yield "numel_overflow", seed(shape=(INT64_MAX, 2), strides=(2, 1))
    yield "numel_sqrt_overflow", seed(shape=(3037000500, 3037000500), strides=(1, 1))
    yield "stride_int64_min", seed(shape=(2,), strides=(INT64_MIN,))
    yield "span_overflow_negative", seed(shape=(3, 3), strides=(-(2**62), -(2**62)))
    yield "byte_offset_2_63", seed(shape=(1,), strides=(1,), byte_offset=2**63)
    yield "byte_offset_huge_valid", seed(shape=(1,), strides=(1,), byte_offset=INT64_MAX // 8)
    yield "extent_bits_overflow", seed(dtype=(5, 128), lanes=255, shape=(2**40,), strides=(2**40,))
    yield "int4_packed", seed(dtype=(0, 4), shape=(5,), strides=(1,), byte_offset=1)
    yield "int4_packed_strided", seed(dtype=(0, 4), shape=(3,), strides=(2,))
    yield "int4_padded", seed(dtype=(0, 4), flags=SUBBYTE_PADDED, shape=(2, 3), strides=(1, 2))
    yield "fp6_lanes3", seed(dtype=(15, 6), lanes=3, shape=(7,), strides=(1,))
    yield "uint1_lanes5", seed(dtype=(1, 1), lanes=5, shape=(3, 3), strides=(3, 1), mode=LEGACY)
    yield "dtype_code_18", seed(dtype=(18, 8), shape=(2,), strides=(1,))
    yield "dtype_bits_0", seed(dtype=(3, 0), shape=(2,), strides=(1,))
    yield "dtype_lanes_0", seed(dtype=(2, 32), lanes=0, shape=(2,), strides=(1,))
    yield "dtype_float8bits", seed(dtype=(2, 8), shape=(2,), strides=(1,))
    yield "opaque_24_lanes300", seed(dtype=(3, 24), lanes=300, shape=(2,), strides=(1,))
    yield "version_major_0", seed(version=(0, 8), shape=(2,), strides=(1,))
    yield "version_major_2", seed(version=(2, 0), shape=(2,), strides=(1,))
    yield "v1_0_null_strides", seed(version=(1, 0), mode=STRIDES_NULL, shape=(2, 3), share=2)
    yield "v1_2_null_strides", seed(version=(1, 2), mode=STRIDES_NULL, shape=(2, 3))
    yield "legacy_null_strides", seed(mode=LEGACY | STRIDES_NULL, shape=(4, 0, 2**62))
    yield "legacy_null_strides_copy", seed(mode=LEGACY | STRIDES_NULL, shape=(2, 5))
    yield "shape_null", seed(mode=SHAPE_NULL, shape=(2, 2), strides=(2, 1))
    yield "data_null_with_elements", seed(mode=DATA_NULL, shape=(2,), strides=(1,))
    yield "cuda_check_pointer", seed(device=(2, 0), options=1, shape=(4,), strides=(1,))
    yield "cuda_copy", seed(device=(2, 1), shape=(4,), strides=(1,), copy=COPY_CUDA)
    yield "cuda_host_copy", seed(device=(3, 0), shape=(2, 2), strides=(1, 2))
    yield (
        "rocm_host_to_cuda_host",
        seed(device=(11, 0), shape=(3,), strides=(1,), copy=COPY_CUDA_HOST),
    )
    yield "device_type_5", seed(device=(5, 0), shape=(1,), strides=(1,))
    yield "device_type_99", seed(device=(99, 0), shape=(1,), strides=(1,))
    yield "device_id_negative", seed(device=(1, -1), shape=(1,), strides=(1,))
    yield "copy_to_cpu1_and_99", seed(shape=(2,), strides=(1,), copy=COPY_CPU1, reshare=True)
    yield "copy_to_type99", seed(shape=(2,), strides=(1,), copy=COPY_99)
    yield "options_unknown_bits", seed(options=6, shape=(1,), strides=(1,))
    yield "no_deleter", seed(mode=NO_DELETER, shape=(2,), strides=(1,), share=3)
    yield (
        "export_legacy_mutate",
        seed(mode=EXPORT_LEGACY | MUTATE, flags=READ_ONLY, shape=(2, 2), strides=(2, 1)),
    )
    yield "export_mutate_flags", seed(mode=MUTATE, shape=(3,), strides=(1,), fill=2)
    yield "export_drop_last", seed(mode=DROP, shape=(3,), strides=(1,))
    yield "export_drop_shared", seed(mode=DROP | EXPORT_LEGACY, share=3, shape=(3,), strides=(1,))
    yield "reserved_flags", seed(flags=1 << 40, shape=(2,), strides=(1,), share=2)
    yield "share_zero", seed(share=0, shape=(2,), strides=(1,))
    yield "share_too_many", seed(share=2**32 + 1, shape=(2,), strides=(1,))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    )
    ap.add_argument("--check", action="store_true", help="fail if the files differ from the seeds")
    args = ap.parse_args()
    want = {name: data for name, data in seeds()}
    if args.check:
        have = {f: open(os.path.join(args.out, f), "rb").read() for f in os.listdir(args.out)}
        if have != want:
            print(f"{args.out} is stale: run {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f not in want:
            os.remove(os.path.join(args.out, f))
    for name, data in want.items():
        with open(os.path.join(args.out, name), "wb") as fh:
            fh.write(data)
    print(f"{len(want)} seeds in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
