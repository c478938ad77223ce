package hurray

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
//
// The handle itself lives in C memory (a slot of a block that hurray_go.c
// allocates), never in Go memory: its void* fields hold whatever values the
// producer chose, which the Go runtime must not see as pointers.
type Buffer struct {
	mu   sync.Mutex
	blk  C.hgo_ref  // the block; 0 once released or handed on
	i    C.size_t   // the slot of blk that is this Buffer's handle
	meta C.hgo_meta // the handle's scalar fields (fixed while it is live)
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

// wrap makes a Buffer that owns slot i of r.blk and arms its finaliser.
func wrap(r *C.hgo_ret, i C.size_t) *Buffer {
	b := &Buffer{blk: r.blk, i: i, meta: r.meta}
	runtime.SetFinalizer(b, finalize)
	return b
}

// finalize runs on the finaliser goroutine for a Buffer that became
// unreachable; legal because a handle may be released from any thread.
func finalize(b *Buffer) {
	if b.take() {
		finalizerReleases.Add(1)
	}
}

// take moves the slot out of b (b reads as released) and, if it was live,
// releases it outside the lock, so a release callback that re-enters b sees
// it released. It reports whether this call released.
func (b *Buffer) take() bool {
	b.mu.Lock()
	blk, i := b.blk, b.i
	b.blk = 0
	b.mu.Unlock()
	if blk == 0 {
		return false
	}
	C.hgo_drop(blk, i)
	return true
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
	return b.blk == 0
}

// Share returns n new Buffers of the same memory (1 <= n <= 2^32 - 1); b
// keeps its own reference. Each is released independently. The n handles are
// allocated in C, in one block, before anything is shared: when they cannot
// be, Share returns an *Error with ErrOutOfMemory. (The n *Buffer values
// are Go allocations made after that, a few dozen bytes each.) On error nothing
// changes.
func (b *Buffer) Share(n int) ([]*Buffer, error) {
	const op = "hurray.Buffer.Share"
	if n < 1 || uint64(n) > 1<<32-1 {
		return nil, &Error{Op: op, Status: ErrInvalidArgument, Message: "n must be 1 .. 4294967295"}
	}
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return nil, released(op)
	}
	r := C.hgo_share(b.blk, b.i, C.size_t(n))
	b.mu.Unlock()
	if err := result(op, r.status, r.msg); err != nil {
		return nil, err
	}
	bufs := make([]*Buffer, n)
	for i := range bufs {
		bufs[i] = wrap(&r, C.size_t(i+1))
	}
	return bufs, nil
}

// scalars returns the handle's scalar fields; ok is false once released.
func (b *Buffer) scalars() (m C.hgo_meta, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.meta, b.blk != 0
}

// dims copies the shape (strides false) or the strides of the live handle;
// nil once released.
func (b *Buffer) dims(strides bool) []int64 {
	var which C.int32_t
	if strides {
		which = 1
	}
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return nil
	}
	d := C.hgo_get_dims(b.blk, b.i, which)
	b.mu.Unlock()
	if d.ndim < 0 {
		return nil
	}
	s := make([]int64, int(d.ndim))
	for k := range s {
		s[k] = int64(d.v[k])
	}
	return s
}

// Shape returns a copy of the extents; nil once released.
func (b *Buffer) Shape() []int64 { return b.dims(false) }

// Strides returns a copy of the strides, in elements; nil once released.
func (b *Buffer) Strides() []int64 { return b.dims(true) }

// DType returns the element type; the zero DType once released.
func (b *Buffer) DType() DType {
	m, ok := b.scalars()
	if !ok {
		return DType{}
	}
	return DType{Code: uint8(m.code), Bits: uint8(m.bits), Lanes: uint16(m.lanes)}
}

// Device returns where the memory is; the zero Device once released.
func (b *Buffer) Device() Device {
	m, ok := b.scalars()
	if !ok {
		return Device{}
	}
	return Device{Type: int32(m.device_type), ID: int32(m.device_id)}
}

// ReadOnly reports whether the memory must not be written (flag READ_ONLY).
func (b *Buffer) ReadOnly() bool {
	m, ok := b.scalars()
	return ok && m.flags&flagReadOnly != 0
}

// Bytes returns the memory the tensor spans, without copying, for host
// memory (CPU and pinned host types); an empty tensor gives an empty,
// non-nil slice. The slice is valid only while b is live: not after Release
// or ToDLPack, and not after b becomes unreachable (the finaliser would
// release it), so keep b alive until the last use of the slice with
// runtime.KeepAlive(b). Do not write it when ReadOnly. Errors:
// ErrUnsupportedDevice for device memory, ErrInvalidArgument once released.
func (b *Buffer) Bytes() ([]byte, error) {
	const op = "hurray.Buffer.Bytes"
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return nil, released(op)
	}
	r := C.hgo_bytes(b.blk, b.i)
	b.mu.Unlock()
	if err := result(op, r.status, r.msg); err != nil {
		return nil, err
	}
	if r.len == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(r.base), int(r.len)), nil
}
