// SPDX-License-Identifier: Apache-2.0

package hurray

// #include "hurray_go.h"
import "C"

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Buffer owns one hurray_buffer handle: one reference to tensor memory. It is
// safe for concurrent use; Close and Release may be called any number of
// times from any goroutines and release once.
//
// The handle itself lives in C memory (a slot of a block that hurray_go.c
// allocates), never in Go memory: its void* fields hold whatever values the
// producer chose, which the Go runtime must not see as pointers.
type Buffer struct {
	mu      sync.Mutex
	readers int32         // WithBytes-style calls running (under mu)
	armed   bool          // the finaliser is set (under mu)
	reuse   bool          // made by NewBuffer or filled by ShareInto: keep the finaliser armed
	drain   chan struct{} // closed when readers drops to 0; made by a waiting release
	blk     C.hgo_ref     // the block; 0 once released or handed on
	own     C.hgo_ref     // ShareInto's block of one slot, kept while b lives; 0: none
	i       C.size_t      // the slot of blk that is this Buffer's handle
	meta    C.hgo_meta    // the handle's scalar fields (fixed while it is live)
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

// String names the common types ("float32", "int64", "uint8") and shows
// others as "dtype(code=C, bits=B, lanes=L)".
func (d DType) String() string {
	if d.Lanes == 1 {
		switch d.Code {
		case 0:
			return "int" + strconv.Itoa(int(d.Bits))
		case 1:
			return "uint" + strconv.Itoa(int(d.Bits))
		case 2:
			return "float" + strconv.Itoa(int(d.Bits))
		}
	}
	return "dtype(code=" + strconv.Itoa(int(d.Code)) + ", bits=" + strconv.Itoa(int(d.Bits)) +
		", lanes=" + strconv.Itoa(int(d.Lanes)) + ")"
}

const flagReadOnly = 1 << 0

var finalizerReleases atomic.Uint64

// FinalizerReleases is the number of Buffers the finaliser released because
// they were dropped without Release. Well-behaved code keeps it at 0.
func FinalizerReleases() uint64 { return finalizerReleases.Load() }

// wrap makes a Buffer that owns slot i of r.blk and arms its finaliser.
func wrap(r *C.hgo_ret, i C.size_t) *Buffer {
	b := &Buffer{blk: r.blk, i: i, meta: r.meta, armed: true}
	runtime.SetFinalizer(b, finalize)
	return b
}

// finalize runs on the finaliser goroutine for a Buffer that became
// unreachable; legal because a handle may be released from any thread.
func finalize(b *Buffer) {
	if b.take() {
		finalizerReleases.Add(1)
	}
	if b.own != 0 { // unreachable: no other goroutine can use b
		C.hgo_block_free(b.own)
		b.own = 0
	}
}

// lockIdle locks b.mu once no scoped view (WithBytes, ...) is running: a
// release or export waits here for them. New views may start while it
// waits; it waits for those too.
func (b *Buffer) lockIdle() {
	b.mu.Lock()
	for b.readers > 0 {
		if b.drain == nil {
			b.drain = make(chan struct{})
		}
		ch := b.drain
		b.mu.Unlock()
		<-ch
		b.mu.Lock()
	}
}

// take moves the slot out of b (b reads as released) once no scoped view
// runs and, if it was live, releases it outside the lock, so a release
// callback that re-enters b sees it released. It reports whether this call
// released.
func (b *Buffer) take() bool {
	b.lockIdle()
	blk, i, own := b.blk, b.i, b.own
	b.blk = 0
	b.disarm()
	b.mu.Unlock()
	if blk == 0 {
		return false
	}
	if blk == own {
		C.hgo_release_slot(blk, i) // ShareInto's own block stays with b
	} else {
		C.hgo_drop(blk, i)
	}
	return true
}

// Release gives the Buffer's reference back. The first call releases; later
// calls (from any goroutine) do nothing, so Release suits code where several
// paths may release. It waits for WithBytes and the typed views running on
// other goroutines (calling it inside their callback on the same Buffer
// deadlocks). The memory's own release runs when the last Buffer or tensor
// sharing it is released, on that goroutine's thread.
func (b *Buffer) Release() {
	b.take()
}

// disarm clears the finaliser of a released Buffer, except of a reusable
// one (NewBuffer, ShareInto), whose finaliser stays for its next share and
// finds nothing to release if it runs. Called with b.mu held.
func (b *Buffer) disarm() {
	if b.armed && !b.reuse {
		runtime.SetFinalizer(b, nil)
		b.armed = false
	}
}

// Close is Release as an io.Closer, the form to prefer (defer b.Close()): it
// returns nil when this call released the Buffer, and an *Error with
// ErrClosed (errors.Is(err, hurray.ErrClosed)) when it was already released
// or handed on (a second Close is a bug this reports; Release stays silent).
// It waits for running scoped views as Release does.
func (b *Buffer) Close() error {
	if !b.take() {
		return closedErr("hurray.Buffer.Close")
	}
	return nil
}

// Released reports whether the Buffer no longer holds a reference
// (Release, Close, or handed on by ToDLPack/ToDLPackVersioned).
func (b *Buffer) Released() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.blk == 0
}

// Share returns n new Buffers of the same memory (1 <= n <= 2^32 - 1); b
// keeps its own reference. Each is released independently. The n handles are
// allocated in C, in one block, before anything is shared: when they cannot
// be, Share returns an *Error with ErrOutOfMemory. (The n *Buffer values and
// the slice are Go allocations made after that, a few dozen bytes each.)
// Errors: ErrInvalidArgument for n out of range, ErrClosed once b is
// released; on error nothing changes.
func (b *Buffer) Share(n int) ([]*Buffer, error) {
	const op = "hurray.Buffer.Share"
	if n < 1 || uint64(n) > 1<<32-1 {
		return nil, &Error{Op: op, Status: ErrInvalidArgument, Message: "n must be 1 .. 4294967295"}
	}
	r, err := b.share(op, n)
	if err != nil {
		return nil, err
	}
	labelSlots(r.blk, 1, C.size_t(n), op, 1)
	bufs := make([]*Buffer, n)
	for i := range bufs {
		bufs[i] = wrap(&r, C.size_t(i+1))
	}
	return bufs, nil
}

// ShareOne is Share(1) returning the one new Buffer itself: one Go
// allocation (the Buffer) instead of two (docs/performance.md, Go).
func (b *Buffer) ShareOne() (*Buffer, error) {
	const op = "hurray.Buffer.ShareOne"
	r, err := b.share(op, 1)
	if err != nil {
		return nil, err
	}
	labelSlots(r.blk, 1, 1, op, 1)
	return wrap(&r, 1), nil
}

// NewBuffer returns a Buffer that holds nothing (it reads as released), for
// ShareInto to fill again and again: a Share(1)+Release loop over it makes
// no Go allocation and sets no finaliser per pair (docs/performance.md, Go).
// Its finaliser, set once here, releases what it holds when it becomes
// unreachable.
func NewBuffer() *Buffer {
	b := &Buffer{armed: true, reuse: true}
	runtime.SetFinalizer(b, finalize)
	return b
}

// ShareInto is ShareOne into dst, a Buffer that holds nothing (NewBuffer,
// or one released, closed or handed on): dst gets a new reference to b's
// memory, to be released as any Buffer, and stays reusable for the next
// ShareInto. No Go allocation. Errors: ErrInvalidArgument when dst holds a
// reference or is b, ErrClosed when b is released, libhurray's statuses;
// on error nothing changes. dst must not be used by other goroutines
// during the call.
func (b *Buffer) ShareInto(dst *Buffer) error {
	const op = "hurray.Buffer.ShareInto"
	if dst == nil || dst == b {
		return &Error{Op: op, Status: ErrInvalidArgument, Message: "dst must be another Buffer"}
	}
	// Both locks, in address order (a.ShareInto(b) racing b.ShareInto(a)
	// cannot deadlock).
	first, second := b, dst
	if uintptr(unsafe.Pointer(dst)) < uintptr(unsafe.Pointer(b)) {
		first, second = dst, b
	}
	first.mu.Lock()
	second.mu.Lock()
	err := b.shareIntoLocked(op, dst)
	second.mu.Unlock()
	first.mu.Unlock()
	return err
}

// shareIntoLocked is ShareInto with both mutexes held.
func (b *Buffer) shareIntoLocked(op string, dst *Buffer) error {
	if b.blk == 0 {
		return closedErr(op)
	}
	if dst.blk != 0 {
		return &Error{Op: op, Status: ErrInvalidArgument, Message: "dst still holds a reference"}
	}
	if dst.own == 0 {
		if dst.own = C.hgo_block_own(); dst.own == 0 {
			return &Error{Op: op, Status: ErrOutOfMemory, Message: "cannot allocate the handle"}
		}
	}
	r := C.hgo_share_into(b.blk, b.i, dst.own)
	if err := result(op, r.status, r.msg); err != nil {
		return err
	}
	labelSlots(dst.own, 0, 0, op, 2)
	dst.blk, dst.i, dst.meta, dst.reuse = dst.own, 0, r.meta, true
	if !dst.armed {
		runtime.SetFinalizer(dst, finalize)
		dst.armed = true
	}
	return nil
}

// share makes n shares of b's handle in one new block (slots 1..n).
func (b *Buffer) share(op string, n int) (C.hgo_ret, error) {
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return C.hgo_ret{}, closedErr(op)
	}
	r := C.hgo_share(b.blk, b.i, C.size_t(n))
	b.mu.Unlock()
	if err := result(op, r.status, r.msg); err != nil {
		return C.hgo_ret{}, err
	}
	return r, nil
}

// scalars returns the handle's scalar fields, or ErrClosed once released.
func (b *Buffer) scalars(op string) (C.hgo_meta, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blk == 0 {
		return C.hgo_meta{}, closedErr(op)
	}
	return b.meta, nil
}

// dims copies the shape (strides false) or the strides of the live handle.
func (b *Buffer) dims(op string, strides bool) ([]int64, error) {
	var which C.int32_t
	if strides {
		which = 1
	}
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return nil, closedErr(op)
	}
	d := C.hgo_get_dims(b.blk, b.i, which)
	b.mu.Unlock()
	if d.ndim < 0 {
		return nil, &Error{Op: op, Status: ErrInvalidArgument, Message: "the handle has no such array"}
	}
	s := make([]int64, int(d.ndim))
	for k := range s {
		s[k] = int64(d.v[k])
	}
	return s, nil
}

// Shape returns a copy of the extents (empty, non-nil for a 0-d tensor).
// Errors: ErrClosed once released or handed on.
func (b *Buffer) Shape() ([]int64, error) { return b.dims("hurray.Buffer.Shape", false) }

// Strides returns a copy of the strides, in elements. Errors: ErrClosed once
// released or handed on.
func (b *Buffer) Strides() ([]int64, error) { return b.dims("hurray.Buffer.Strides", true) }

// DType returns the element type. Errors: ErrClosed once released or handed
// on (with the zero DType).
func (b *Buffer) DType() (DType, error) {
	m, err := b.scalars("hurray.Buffer.DType")
	if err != nil {
		return DType{}, err
	}
	return DType{Code: uint8(m.code), Bits: uint8(m.bits), Lanes: uint16(m.lanes)}, nil
}

// Device returns where the memory is. Errors: ErrClosed once released or
// handed on (with the zero Device).
func (b *Buffer) Device() (Device, error) {
	m, err := b.scalars("hurray.Buffer.Device")
	if err != nil {
		return Device{}, err
	}
	return Device{Type: int32(m.device_type), ID: int32(m.device_id)}, nil
}

// ReadOnly reports whether the memory must not be written (flag READ_ONLY);
// false once released (Released tells the two apart).
func (b *Buffer) ReadOnly() bool {
	m, err := b.scalars("")
	return err == nil && m.flags&flagReadOnly != 0
}
