# SPDX-License-Identifier: Apache-2.0
"""GPU paths of the binding against the test-double CUDA driver.

tests/fake_drivers/fake_cuda.cc (built by the repository's CMake test build as
tests/fake_drivers/cuda/libcuda.so.1) is a CUDA driver backed by host memory that
logs every call. libhurray is pointed at it with HURRAY_CUDA_DRIVER_PATH,
read once per process, so each check runs in a subprocess. Found through
$HURRAY_FAKE_CUDA_DRIVER, else $HURRAY_BUILD_DIR/tests/fake_drivers/cuda/libcuda.so.1,
else build/dev/ in the repository; skipped (with the reason) when none exists.
"""

import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def find_fake_driver() -> Optional[str]:
    candidates = []
    if os.environ.get("HURRAY_FAKE_CUDA_DRIVER"):
        candidates.append(pathlib.Path(os.environ["HURRAY_FAKE_CUDA_DRIVER"]))
    if os.environ.get("HURRAY_BUILD_DIR"):
        candidates.append(
            pathlib.Path(os.environ["HURRAY_BUILD_DIR"]) / "tests/fake_drivers/cuda/libcuda.so.1"
        )
    candidates.append(REPO / "build/dev/tests/fake_drivers/cuda/libcuda.so.1")
    for c in candidates:
        if c.is_file():
            return str(c)
    return None


FAKE = find_fake_driver()
pytestmark = pytest.mark.skipif(
    FAKE is None,
    reason="no fake CUDA driver build (tests/fake_drivers/cuda/libcuda.so.1; set HURRAY_BUILD_DIR "
    "or HURRAY_FAKE_CUDA_DRIVER)",
)

PRELUDE = textwrap.dedent(
    """
    import ctypes, os, sys
    import numpy as np
    import hurray

    fake = ctypes.CDLL(os.environ["HURRAY_CUDA_DRIVER_PATH"])

    class FakeCall(ctypes.Structure):
        _fields_ = [("fn", ctypes.c_char * 40), ("thread", ctypes.c_uint64),
                    ("device", ctypes.c_int32), ("result", ctypes.c_int32),
                    ("ptr", ctypes.c_void_p), ("stream", ctypes.c_void_p),
                    ("other", ctypes.c_void_p), ("bytes", ctypes.c_uint64)]

    fake.fake_cuda_call_count.argtypes = [ctypes.c_char_p]
    fake.fake_cuda_calls.argtypes = [ctypes.c_char_p, ctypes.POINTER(FakeCall), ctypes.c_int]
    fake.fake_cuda_live_allocations.restype = ctypes.c_int64

    def calls(fn):
        out = (FakeCall * 64)()
        n = fake.fake_cuda_calls(fn.encode(), out, 64)
        return list(out[:min(n, 64)])

    def calls_all():
        out = (FakeCall * 256)()
        n = fake.fake_cuda_calls(None, out, 256)
        return list(out[:min(n, 256)])

    def to_cuda(buf):
        # CPU -> CUDA device 0 through the protocol: a private copy.
        return hurray.from_dlpack(buf.__dlpack__(max_version=(1, 3), dl_device=(2, 0)))
    """
)


def run(body: str) -> str:
    env = dict(
        os.environ,
        HURRAY_CUDA_DRIVER_PATH=str(FAKE),
        HURRAY_TESTS_DIR=str(pathlib.Path(__file__).resolve().parent),
    )
    # The fake numbers its GPUs by this, as the driver does: a value meant
    # for a real GPU of this machine is not for it.
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body) + "\nprint('DONE')\n"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0 and "DONE" in r.stdout, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_copy_to_cuda_and_back() -> None:
    run(
        """
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        g = to_cuda(hurray.from_dlpack(a))
        assert g.device == (2, 0) and g.__dlpack_device__() == (2, 0), g.device
        assert g.is_copied and g.shape == (3, 4) and g.data_ptr != a.ctypes.data
        assert repr(g) == "<hurray.Buffer float32[3, 4] cuda:0>", repr(g)
        assert fake.fake_cuda_live_allocations() == 1
        # NumPy asks for the CPU (dl_device) and gets a copy back.
        back = np.from_dlpack(g, device="cpu")
        np.testing.assert_array_equal(back, a)
        c = hurray.from_dlpack(g, device="cpu")
        assert c.device == (1, 0)
        # copy=False cannot cross devices.
        try:
            hurray.from_dlpack(g, device="cpu", copy=False)
        except BufferError:
            pass
        else:
            raise AssertionError("copy=False crossed devices")
        g.release()
        assert fake.fake_cuda_live_allocations() == 0
        """
    )


def test_from_dlpack_device_copies_what_the_producer_cannot_move() -> None:
    run(
        """
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        # NumPy refuses dl_device=(2, 0): hurray takes the array on the CPU
        # and copies it to the device itself.
        g = hurray.from_dlpack(a, device=(2, 0))
        assert g.device == (2, 0) and g.is_copied and g.shape == (3, 4), g
        assert fake.fake_cuda_live_allocations() == 1
        np.testing.assert_array_equal(np.from_dlpack(g, device="cpu"), a)
        c = hurray.from_dlpack(a, device=(2, 0), copy=True)
        assert c.device == (2, 0) and c.is_copied
        assert fake.fake_cuda_live_allocations() == 2
        c.release()
        try:
            hurray.from_dlpack(a, device=(2, 0), copy=False)
        except BufferError as e:
            assert "copy=False" in str(e), str(e)
        else:
            raise AssertionError("copy=False crossed devices")
        assert fake.fake_cuda_live_allocations() == 1

        # The other way: a producer on the device that exports only there.
        class OnDevice:
            def __init__(self, buf):
                self.buf, self.asked = buf, []
            def __dlpack__(self, **kw):
                self.asked.append(sorted(kw))
                if "dl_device" in kw:
                    raise NotImplementedError("dl_device")
                return self.buf.__dlpack__(**kw)
            def __dlpack_device__(self):
                return self.buf.__dlpack_device__()

        p = OnDevice(g)
        fake.fake_cuda_reset()
        h = hurray.from_dlpack(p, device="cpu")
        assert h.device == (1, 0) and h.is_copied, h
        # The second call, on the producer's own CUDA device, names the
        # legacy default stream; the first (for the CPU) names none.
        assert p.asked == [["dl_device", "max_version"], ["max_version", "stream"]], p.asked
        assert fake.fake_cuda_call_count(b"cuMemcpyAsync") >= 1  # hurray_copy, device to host
        np.testing.assert_array_equal(np.from_dlpack(h), a)
        assert fake.fake_cuda_live_allocations() == 1  # only g's
        g.release()
        assert fake.fake_cuda_live_allocations() == 0
        """
    )


def test_stream_rules_and_waits() -> None:
    run(
        """
        g = to_cuda(hurray.from_dlpack(np.arange(8, dtype=np.float64)))
        fake.fake_cuda_reset()
        # None and 1 are the legacy default stream, where the buffer already is.
        g.__dlpack__(max_version=(1, 3))
        g.__dlpack__(max_version=(1, 3), stream=1)
        g.__dlpack__(max_version=(1, 3), stream=-1)
        assert fake.fake_cuda_call_count(b"cuStreamWaitEvent") == 0
        # Another stream waits for the legacy default stream on the device.
        g.__dlpack__(max_version=(1, 3), stream=0x5000)
        g.__dlpack__(max_version=(1, 3), stream=2)
        waits = calls("cuStreamWaitEvent")
        assert [(w.stream, w.other) for w in waits] == [(0x5000, 1), (2, 1)], \\
            [(w.stream, w.other) for w in waits]
        for bad in (0, -2):
            try:
                g.__dlpack__(max_version=(1, 3), stream=bad)
            except ValueError as e:
                assert "not valid for CUDA" in str(e)
            else:
                raise AssertionError(f"stream={bad} accepted")
        # A CPU consumer (dl_device) follows the CPU rules.
        try:
            g.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=3)
        except ValueError as e:
            assert "CPU" in str(e)
        else:
            raise AssertionError("stream accepted for a CPU consumer")
        """
    )


def test_from_dlpack_passes_the_stream_to_a_gpu_producer() -> None:
    # The array API's __dlpack__ (docs/impl/python.md §4): a consumer names
    # its stream; None leaves the producer to assume the legacy default
    # stream, which producers that no longer synchronise for None do not.
    run(
        """
        g = to_cuda(hurray.from_dlpack(np.arange(8, dtype=np.float32)))

        class Producer:
            # Records the stream each __dlpack__ call was given ("absent":
            # none), then exports g (or raises `fail`).
            def __init__(self, device, fail=None, old=False):
                self.device, self.fail, self.old, self.asked = device, fail, old, []
            def __dlpack_device__(self):
                return self.device
            def __dlpack__(self, **kw):
                if self.old and "max_version" in kw:
                    raise TypeError("unexpected keyword argument 'max_version'")
                self.asked.append(kw.get("stream", "absent"))
                if self.fail is not None:
                    raise self.fail
                return g.__dlpack__(max_version=(1, 3))

        class Stop(Exception):
            pass

        # CUDA: the legacy default stream (1), where the Buffer's event is
        # recorded: no wait issued.
        fake.fake_cuda_reset()
        p = Producer((2, 0))
        b = hurray.from_dlpack(p)
        assert p.asked == [1], p.asked
        assert b.device == (2, 0) and b.data_ptr == g.data_ptr
        assert fake.fake_cuda_call_count(b"cuStreamWaitEvent") == 0
        assert [r.stream for r in calls("cuEventRecord")] == [1]
        b.release()
        # CUDA managed memory too; ROCm gets 0 (its default stream).
        for device, want in (((13, 0), 1), ((10, 0), 0)):
            p = Producer(device, fail=Stop())
            try:
                hurray.from_dlpack(p)
            except Stop:
                pass
            assert p.asked == [want], (device, p.asked)
        # The caller's stream is passed on, and the Buffer's event recorded
        # there (nothing waits yet, the host never); -1 records nothing.
        fake.fake_cuda_reset()
        p = Producer((2, 0))
        b = hurray.from_dlpack(p, stream=0x5000)
        c = hurray.from_dlpack(p, stream=-1)
        d = hurray.from_dlpack(p, stream=1)
        assert p.asked == [0x5000, -1, 1], p.asked
        assert fake.fake_cuda_call_count(b"cuStreamWaitEvent") == 0
        assert [r.stream for r in calls("cuEventRecord")] == [0x5000, 1], \
            [r.stream for r in calls("cuEventRecord")]
        assert fake.fake_cuda_call_count(b"cuCtxSynchronize") == 0
        assert fake.fake_cuda_call_count(b"cuStreamSynchronize") == 0
        for x in (b, c, d):
            x.release()
        # Streams the device's rules refuse, before the producer is asked.
        refused = (((2, 0), 0, "CUDA"), ((10, 0), 2, "ROCm"), ((1, 0), 3, "no streams"))
        for device, bad, what in refused:
            p = Producer(device)
            try:
                hurray.from_dlpack(p, stream=bad)
            except ValueError as e:
                assert what in str(e), str(e)
            else:
                raise AssertionError(f"stream={bad} accepted for {device}")
            assert p.asked == [], p.asked
        try:
            hurray.from_dlpack(Producer((2, 0)), stream="1")
        except TypeError:
            pass
        else:
            raise AssertionError("a str stream accepted")
        # A CPU producer is passed no stream (NumPy refuses any).
        a = np.arange(4, dtype=np.float32)
        p = Producer((1, 0), fail=Stop())
        try:
            hurray.from_dlpack(p)
        except Stop:
            pass
        assert p.asked == ["absent"], p.asked
        assert hurray.from_dlpack(a).device == (1, 0)
        # A producer older than DLPack 1.0 (no max_version) is asked with
        # the stream alone.
        p = Producer((2, 0), old=True)
        b = hurray.from_dlpack(p)
        assert p.asked == [1], p.asked
        b.release()
        g.release()
        assert fake.fake_cuda_live_allocations() == 0
        """
    )


def test_dlpack_stream_waits_on_the_import_event_not_the_default_stream() -> None:
    # A GPU Buffer from from_dlpack carries an event recorded on the stream
    # its producer ordered its work on (docs/impl/python.md §4):
    # __dlpack__(stream=s) makes s wait on that event, so work on the import
    # stream is waited for and later work on the default stream is not.
    # Before events, s waited on the legacy default stream (1) instead.
    run(
        """
        g = to_cuda(hurray.from_dlpack(np.arange(8, dtype=np.float32)))

        class Producer:
            def __dlpack_device__(self):
                return (2, 0)
            def __dlpack__(self, **kw):
                return g.__dlpack__(max_version=(1, 3))

        def waits():
            return [(w.stream, w.other) for w in calls("cuStreamWaitEvent")]

        def host_syncs():
            return (fake.fake_cuda_call_count(b"cuStreamSynchronize")
                    + fake.fake_cuda_call_count(b"cuCtxSynchronize"))

        fake.fake_cuda_reset()
        b = hurray.from_dlpack(Producer(), stream=0x5000)
        assert [r.stream for r in calls("cuEventRecord")] == [0x5000]
        assert waits() == [] and host_syncs() == 0
        fake.fake_cuda_reset()
        b.__dlpack__(max_version=(1, 3), stream=0x6000)
        assert waits() == [(0x6000, 0x5000)], waits()
        # Nothing recorded on the default stream, nothing waited for there.
        assert fake.fake_cuda_call_count(b"cuEventRecord") == 0
        assert fake.fake_cuda_call_count(b"cuEventCreate") == 0
        # stream=None is the legacy default stream (1): it waits on the event.
        b.__dlpack__(max_version=(1, 3))
        # The import stream itself is already ordered; -1 asks for nothing.
        b.__dlpack__(max_version=(1, 3), stream=0x5000)
        b.__dlpack__(max_version=(1, 3), stream=-1)
        assert waits() == [(0x6000, 0x5000), (1, 0x5000)], waits()
        assert host_syncs() == 0
        # Shares and from_dlpack of the Buffer carry the same event.
        fake.fake_cuda_reset()
        (s,) = b.share(1)
        t = hurray.from_dlpack(b)
        s.__dlpack__(max_version=(1, 3), stream=0x6000)
        t.__dlpack__(max_version=(1, 3), stream=0x6000)
        assert waits() == [(0x6000, 0x5000)] * 2, waits()
        # Released with the last Buffer that carries it.
        del b, s
        assert fake.fake_cuda_call_count(b"cuEventDestroy") == 0
        del t
        assert fake.fake_cuda_call_count(b"cuEventDestroy") == 1

        # A default import (no stream=): the event is on the legacy stream,
        # where the producer was told to order its work; a consumer stream
        # waits on it, without a record at export time.
        d = hurray.from_dlpack(Producer())
        fake.fake_cuda_reset()
        d.__dlpack__(max_version=(1, 3), stream=0x6000)
        assert waits() == [(0x6000, 1)], waits()
        assert fake.fake_cuda_call_count(b"cuEventRecord") == 0
        # A copy out of it (to the CPU) is queued on the default stream,
        # which is already where the event is: nothing to wait for.
        assert fake.fake_cuda_call_count(b"cuStreamWaitEvent") == 1

        # A copy out of a Buffer whose work is on another stream: the
        # default stream (where hurray_copy copies) waits on the event first.
        e = hurray.from_dlpack(Producer(), stream=0x5000)
        fake.fake_cuda_reset()
        h = hurray.from_dlpack(e, device="cpu")
        assert h.device == (1, 0)
        assert waits() == [(1, 0x5000)], waits()
        first_copy = [c.fn for c in calls_all()].index(b"cuMemcpyAsync")
        first_wait = [c.fn for c in calls_all()].index(b"cuStreamWaitEvent")
        assert first_wait < first_copy

        # Buffers without an event (hurray.empty, copies) keep the rule of
        # the default stream: a consumer stream waits for it.
        fake.fake_cuda_reset()
        g.__dlpack__(max_version=(1, 3), stream=0x6000)
        assert waits() == [(0x6000, 1)], waits()
        assert fake.fake_cuda_call_count(b"cuEventRecord") == 1
        for x in (d, e, h, g):
            x.release()
        assert fake.fake_cuda_live_allocations() == 0
        """
    )


def test_exchange_api_import_records_the_event_on_the_work_stream() -> None:
    # A producer whose type publishes the DLPack C exchange API: its
    # current_work_stream (here 0x7000) is where the Buffer's event is
    # recorded, and a consumer stream waits on it (docs/impl/python.md §7).
    run(
        """
        sys.path.insert(0, os.environ["HURRAY_TESTS_DIR"])
        from dlpack_ctypes import FROM_PY, WORK_STREAM, DLManagedTensorVersioned, ExchangeAPI
        py = ctypes.pythonapi
        py.PyCapsule_GetPointer.restype = ctypes.c_void_p
        py.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        py.PyCapsule_New.restype = ctypes.py_object
        py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        own = ExchangeAPI.from_address(py.PyCapsule_GetPointer(
            hurray.Buffer.__dict__["__dlpack_c_exchange_api__"], b"dlpack_exchange_api"))
        buffer_from_py = FROM_PY(own.managed_tensor_from_py_object_no_sync)

        g = to_cuda(hurray.from_dlpack(np.arange(8, dtype=np.float32)))
        asked = []
        def from_py(obj, out):
            return buffer_from_py(obj.g, out)
        def work_stream(device_type, device_id, out):
            asked.append((device_type, device_id))
            out[0] = 0x7000
            return 0
        cb_from, cb_work = FROM_PY(from_py), WORK_STREAM(work_stream)
        table = ExchangeAPI()
        table.header.major, table.header.minor = 1, 3
        table.managed_tensor_from_py_object_no_sync = ctypes.cast(cb_from, ctypes.c_void_p).value
        table.current_work_stream = ctypes.cast(cb_work, ctypes.c_void_p).value

        class Tensor:
            __dlpack_c_exchange_api__ = py.PyCapsule_New(
                ctypes.addressof(table), b"dlpack_exchange_api", None)
            def __init__(self, g):
                self.g = g

        before = dict(hurray._native._exchange_api_stats())
        fake.fake_cuda_reset()
        b = hurray.from_dlpack(Tensor(g))
        after = dict(hurray._native._exchange_api_stats())
        assert after["consumer_table"] == before["consumer_table"] + 1
        assert asked == [(2, 0)], asked
        assert [r.stream for r in calls("cuEventRecord")] == [0x7000]
        assert fake.fake_cuda_call_count(b"cuStreamWaitEvent") == 0
        b.__dlpack__(max_version=(1, 3), stream=0x6000)
        assert [(w.stream, w.other) for w in calls("cuStreamWaitEvent")] == [(0x6000, 0x7000)]
        assert fake.fake_cuda_call_count(b"cuStreamSynchronize") == 0
        assert fake.fake_cuda_call_count(b"cuCtxSynchronize") == 0
        # hurray.Buffer's own table says its work is on the default stream:
        # handing b on through it first makes that stream wait on the event.
        fake.fake_cuda_reset()
        t = ctypes.POINTER(DLManagedTensorVersioned)()
        assert buffer_from_py(b, ctypes.byref(t)) == 0
        assert [(w.stream, w.other) for w in calls("cuStreamWaitEvent")] == [(1, 0x7000)]
        cap = py.PyCapsule_New(ctypes.addressof(t.contents), b"dltensor_versioned", None)
        hurray.from_dlpack(cap).release()
        b.release()
        g.release()
        assert fake.fake_cuda_live_allocations() == 0
        assert fake.fake_cuda_call_count(b"cuEventDestroy") == 1
        """
    )


def test_gpu_buffer_released_exactly_once_from_any_thread() -> None:
    run(
        """
        from hurray_test_aid import release_on_native_thread
        g = to_cuda(hurray.from_dlpack(np.ones(1024, dtype=np.float32)))
        parts = g.share(3)
        caps = [g.__dlpack__(max_version=(1, 3)) for _ in range(2)]
        g.release()
        for p in parts[:2]:
            p.release()
        release_on_native_thread(caps[0])
        assert fake.fake_cuda_live_allocations() == 1
        del caps[1]
        assert fake.fake_cuda_live_allocations() == 1
        release_on_native_thread(parts[2])  # the last one, on a native thread
        assert fake.fake_cuda_live_allocations() == 0
        frees = [c for c in calls("cuMemFree")]
        assert len(frees) == 1, len(frees)
        """
    )


def test_buffer_protocol_refuses_gpu_memory_and_read_only_survives_the_copy() -> None:
    run(
        """
        g = to_cuda(hurray.from_dlpack(np.arange(8, dtype=np.float32)))
        assert g.device == (2, 0)
        for use in (memoryview, bytes, np.asarray):
            try:
                use(g)
            except BufferError as e:
                assert "cuda:0" in str(e) and "device='cpu'" in str(e), e
            else:
                raise AssertionError(f"{use.__name__} took CUDA memory")
        back = hurray.from_dlpack(g, device="cpu")
        assert memoryview(back).tolist() == list(range(8))
        # A read-only source: the copy on the device is private, hence
        # writable (IS_COPIED), and the source Buffer stays read-only.
        a = np.arange(4.0)
        a.flags.writeable = False
        ro = hurray.from_dlpack(a)
        c = hurray.from_dlpack(ro, device=(2, 0))
        assert ro.readonly and c.is_copied and not c.readonly
        # Streams: CPU consumers take None only, GPU consumers -1 as well.
        g.__dlpack__(max_version=(1, 3), stream=-1)
        try:
            g.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=-1)
        except ValueError as e:
            assert "None" in str(e)
        else:
            raise AssertionError("stream=-1 accepted for a CPU consumer")
        """
    )


def test_cuda_buffer_sent_to_a_worker_and_back(tmp_path: pathlib.Path) -> None:
    # A spawned worker (a forked one could not use the driver its parent
    # loaded) receives a CUDA Buffer through multiprocessing and returns it.
    # The worker cannot export memory it opened from another process, so
    # libhurray forwards the sender's message (docs/impl/ipc.md §6); the
    # sender, which cannot open its own IPC handle (the fake refuses as the
    # driver does), gets a share of its own memory back: no driver open in
    # the parent, the same values, and one cuMemFree once both are released.
    script = tmp_path / "worker_and_back.py"
    script.write_text(
        PRELUDE
        + textwrap.dedent(
            """
            import multiprocessing as mp

            def echo(buf):
                return buf

            if __name__ == "__main__":
                src = to_cuda(hurray.from_dlpack(np.arange(16, dtype=np.float32)))
                assert src.device == (2, 0), src.device
                ctx = mp.get_context("spawn")
                with ctx.Pool(1) as pool:
                    back = pool.apply(echo, (src,))
                assert back.device == (2, 0), back.device
                assert back.data_ptr == src.data_ptr, (back.data_ptr, src.data_ptr)
                assert fake.fake_cuda_call_count(b"cuIpcOpenMemHandle") == 0
                host = np.from_dlpack(back, device="cpu")
                assert host.tolist() == list(range(16)), host
                assert fake.fake_cuda_call_count(b"cuMemFree") == 0
                del back, host
                import gc, time
                gc.collect()
                assert fake.fake_cuda_call_count(b"cuMemFree") == 0  # src still holds it
                del src
                gc.collect()
                for _ in range(500):
                    if fake.fake_cuda_call_count(b"cuMemFree") == 1:
                        break
                    time.sleep(0.01)
                assert fake.fake_cuda_call_count(b"cuMemFree") == 1
                assert fake.fake_cuda_live_allocations() == 0
                print("DONE")
            """
        )
    )
    env = dict(
        os.environ,
        HURRAY_CUDA_DRIVER_PATH=str(FAKE),
        HURRAY_TESTS_DIR=str(pathlib.Path(__file__).resolve().parent),
    )
    # The fake numbers its GPUs by this, as the driver does: a value meant
    # for a real GPU of this machine is not for it.
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0 and "DONE" in r.stdout, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
