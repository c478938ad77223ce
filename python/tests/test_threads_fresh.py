# SPDX-License-Identifier: Apache-2.0
"""The first call into libhurray on a fresh thread hands out complete handles.

The pip-built module is a Release build of libhurray, loaded the way users
load it: `import hurray` dlopens the extension, whose DT_NEEDED pulls in
libhurray. Built with `-mtls-dialect=gnu2`, such a library handed out shares
with NULL shape and strides (and cleared the source) on the first
`hurray_share` of every thread but the main one, and `buf.share(n)` there
crashed the interpreter. These tests make that first call on several fresh
`threading.Thread`s and check every field of what comes out, in a child
process, so that a crash is a failed test and not a dead test run.
"""

import json
import subprocess
import sys
import textwrap
from typing import Any, Dict, List

# Run in a fresh interpreter: the main thread imports the tensor, then each
# worker thread's FIRST hurray call is buf.share(n) (attribute reads of the
# shares come after it). Every worker reports what it saw; the parent checks.
_CHILD = textwrap.dedent(
    """
    import faulthandler, json, sys, threading
    faulthandler.enable()
    import numpy as np
    import hurray

    THREADS, N = 8, 3
    base = np.arange(48, dtype=np.int32).reshape(6, 8)
    src = base[1:5, ::2]            # shape (4, 4), strides (8, 2) elements, offset data
    buf = hurray.from_dlpack(src)   # an imported tensor (NumPy's capsule)
    start = threading.Barrier(THREADS)
    results = {}

    def describe(b):
        return {"shape": list(b.shape), "strides": list(b.strides), "ndim": b.ndim,
                "dtype": b.dtype, "device": list(b.device), "data_ptr": b.data_ptr,
                "readonly": b.readonly}

    def seen_by_numpy(b):
        a = np.from_dlpack(b)
        return {"shape": list(a.shape), "strides": list(a.strides), "dtype": a.dtype.str,
                "data": a.ctypes.data, "values": a.tolist(),
                "device": list(a.__dlpack_device__())}

    def work(k):
        start.wait()                # all threads are alive and fresh together
        try:
            shares = buf.share(N)   # the thread's first call into libhurray
            results[k] = {"shares": [describe(s) for s in shares],
                          "numpy": [seen_by_numpy(s) for s in shares],
                          "source_after": describe(buf)}
        except BaseException as e:  # reported, not lost in the thread
            results[k] = {"error": repr(e)}

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect = {"shape": [4, 4], "strides": [8, 2], "ndim": 2, "dtype": "int32",
              "device": [1, 0], "data_ptr": src.ctypes.data, "readonly": False}
    print(json.dumps({"expect": expect, "source": describe(buf), "values": src.tolist(),
                      "itemsize": src.itemsize, "results": results}))
    """
)


def _run_child() -> Dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (
        f"the child died (rc {r.returncode}; -11 is SIGSEGV: the first hurray_share on a "
        f"fresh thread)\nstdout: {r.stdout}\nstderr: {r.stderr}"
    )
    out: Dict[str, Any] = json.loads(r.stdout)
    return out


def test_first_share_on_fresh_threads_gives_every_field() -> None:
    out = _run_child()
    expect = out["expect"]
    itemsize = out["itemsize"]
    assert out["source"] == expect  # the source Buffer survived every thread's share
    results: Dict[str, Any] = out["results"]
    assert sorted(results) == [str(k) for k in range(8)]
    for k, res in results.items():
        assert "error" not in res, f"thread {k}: {res.get('error')}"
        shares: List[Dict[str, Any]] = res["shares"]
        assert len(shares) == 3
        for i, s in enumerate(shares):
            assert s == expect, f"thread {k}, share {i}: {s} != {expect}"
        assert res["source_after"] == expect, f"thread {k}: the source changed"
        for i, a in enumerate(res["numpy"]):
            assert a["shape"] == expect["shape"], (k, i, a)
            assert a["strides"] == [st * itemsize for st in expect["strides"]], (k, i, a)
            assert a["dtype"] == "<i4", (k, i, a)
            assert a["data"] == expect["data_ptr"], (k, i, a)
            assert a["device"] == [1, 0], (k, i, a)
            assert a["values"] == out["values"], (k, i, a)
