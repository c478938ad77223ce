package hurray

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: -lhurray
// #include "hurray_go.h"
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Buffer owns one hurray_buffer handle: one reference to tensor memory. It is
// safe for concurrent use; Release may be called any number of times from
// any goroutines and releases once.
type Buffer struct {
	mu sync.Mutex
	h  C.hurray_buffer // empty (release_fn NULL) once released or handed on
}

// Device is where the memory lives: a DLPack device type (DeviceCPU, ...)
// and an ordinal.
type Device struct {
	Type int32
	ID   int32
}

// DLPack device types libhurray serves (hurray.h HURRAY_DEVICE_*).
const (
	DeviceCPU         int32 = 1
	DeviceCUDA        int32 = 2
	DeviceCUDAHost    int32 = 3
	DeviceROCM        int32 = 10
	DeviceROCMHost    int32 = 11
	DeviceCUDAManaged int32 = 13
)

// DType is a DLPack element type: DLDataTypeCode, bits of one lane, lanes.
type DType struct {
	Code  uint8
	Bits  uint8
	Lanes uint16
}

// Common element types.
var (
	Int32   = DType{Code: 0, Bits: 32, Lanes: 1}
	Int64   = DType{Code: 0, Bits: 64, Lanes: 1}
	Uint8   = DType{Code: 1, Bits: 8, Lanes: 1}
	Float32 = DType{Code: 2, Bits: 32, Lanes: 1}
	Float64 = DType{Code: 2, Bits: 64, Lanes: 1}
)

const flagReadOnly = 1 << 0

var finalizerReleases atomic.Uint64

// FinalizerReleases is the number of Buffers the finaliser released because
// they were dropped without Release. Well-behaved code keeps it at 0.
func FinalizerReleases() uint64 { return finalizerReleases.Load() }

// wrap makes a Buffer that owns h and arms its finaliser.
func wrap(h C.hurray_buffer) *Buffer {
	b := &Buffer{h: h}
	runtime.SetFinalizer(b, finalize)
	return b
}

// finalize runs on the finaliser goroutine for a Buffer that became
// unreachable; legal because a handle may be released from any thread.
func finalize(b *Buffer) {
	if b.take().release_fn != nil {
		finalizerReleases.Add(1)
	}
}

// take moves the handle out of b (b reads as released) and, if it was live,
// releases the moved copy outside the lock, so a release callback that
// re-enters b sees it released. It returns the handle as it was (its
// release_fn says whether this call released).
func (b *Buffer) take() C.hurray_buffer {
	b.mu.Lock()
	h := b.h
	b.h = C.hurray_buffer{}
	b.mu.Unlock()
	if h.release_fn != nil {
		moved := h
		C.hgo_release(&moved)
	}
	return h
}

// Release gives the Buffer's reference back. The first call releases; later
// calls (from any goroutine) do nothing. The memory's own release runs when
// the last Buffer or tensor sharing it is released, on that goroutine's
// thread.
func (b *Buffer) Release() {
	b.take()
	runtime.SetFinalizer(b, nil)
}

// Released reports whether the Buffer no longer holds a reference
// (Release, or handed on by ToDLPack/ToDLPackVersioned).
func (b *Buffer) Released() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h.release_fn == nil
}

// Share returns n new Buffers of the same memory (n >= 1); b keeps its own
// reference. Each is released independently. On error nothing changes.
func (b *Buffer) Share(n int) ([]*Buffer, error) {
	if n < 1 || uint64(n) > 1<<32-1 {
		return nil, &Error{Op: "hurray.Buffer.Share", Status: ErrInvalidArgument,
			Message: "n must be 1 .. 4294967295"}
	}
	out := make([]C.hurray_buffer, n+1)
	var msg errBuf
	b.mu.Lock()
	if b.h.release_fn == nil {
		b.mu.Unlock()
		return nil, released("hurray.Buffer.Share")
	}
	st := C.hgo_share(&b.h, C.size_t(n+1), &out[0], msg.ptr())
	if st == 0 {
		b.h = out[0]
	}
	b.mu.Unlock()
	if err := check("hurray.Buffer.Share", st, &msg); err != nil {
		return nil, err
	}
	bufs := make([]*Buffer, n)
	for i := range bufs {
		bufs[i] = wrap(out[i+1])
	}
	return bufs, nil
}

// view runs f with the live handle under the lock, or returns false.
func (b *Buffer) view(f func(h *C.hurray_buffer)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h.release_fn == nil {
		return false
	}
	f(&b.h)
	return true
}

// Shape returns a copy of the extents; nil once released.
func (b *Buffer) Shape() []int64 {
	var s []int64
	b.view(func(h *C.hurray_buffer) { s = copyInt64(h.shape, h.ndim) })
	return s
}

// Strides returns a copy of the strides, in elements; nil once released.
func (b *Buffer) Strides() []int64 {
	var s []int64
	b.view(func(h *C.hurray_buffer) { s = copyInt64(h.strides, h.ndim) })
	return s
}

func copyInt64(p *C.int64_t, n C.int32_t) []int64 {
	s := make([]int64, int(n))
	if n > 0 {
		copy(s, unsafe.Slice((*int64)(unsafe.Pointer(p)), int(n)))
	}
	return s
}

// DType returns the element type; the zero DType once released.
func (b *Buffer) DType() DType {
	var d DType
	b.view(func(h *C.hurray_buffer) {
		d = DType{Code: uint8(h.dtype.code), Bits: uint8(h.dtype.bits), Lanes: uint16(h.dtype.lanes)}
	})
	return d
}

// Device returns where the memory is; the zero Device once released.
func (b *Buffer) Device() Device {
	var d Device
	b.view(func(h *C.hurray_buffer) {
		d = Device{Type: int32(h.device.device_type), ID: int32(h.device.device_id)}
	})
	return d
}

// ReadOnly reports whether the memory must not be written (flag READ_ONLY).
func (b *Buffer) ReadOnly() bool {
	ro := false
	b.view(func(h *C.hurray_buffer) { ro = h.flags&flagReadOnly != 0 })
	return ro
}

// Bytes returns the memory the tensor spans, without copying, for host
// memory (CPU and pinned host types). The slice is valid only while b is
// live: not after Release or ToDLPack, and not after b becomes unreachable
// (the finaliser would release it), so keep b alive until the last use of
// the slice with runtime.KeepAlive(b). Do not write it when ReadOnly.
func (b *Buffer) Bytes() ([]byte, error) {
	var out []byte
	var err error
	var msg errBuf
	ok := b.view(func(h *C.hurray_buffer) {
		switch int32(h.device.device_type) {
		case DeviceCPU, DeviceCUDAHost, DeviceROCMHost:
		default:
			err = &Error{Op: "hurray.Buffer.Bytes", Status: ErrUnsupportedDevice,
				Message: "the memory is not host memory"}
			return
		}
		var ext C.hurray_extent
		if err = check("hurray.Buffer.Bytes", C.hgo_extent(h, &ext, msg.ptr()), &msg); err != nil {
			return
		}
		n := int(ext.highest - ext.lowest)
		if n == 0 {
			out = []byte{}
			return
		}
		base := unsafe.Add(h.data, int(ext.lowest))
		out = unsafe.Slice((*byte)(base), n)
	})
	if !ok {
		return nil, released("hurray.Buffer.Bytes")
	}
	return out, err
}
