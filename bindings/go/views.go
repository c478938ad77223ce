// SPDX-License-Identifier: Apache-2.0

package hurray

// #include "hurray_go.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Bytes returns the memory the tensor spans, without copying, for host
// memory (CPU and pinned host types); an empty tensor gives an empty,
// non-nil slice.
//
// Unsafe: the slice is not checked and does not keep the memory alive. It
// reads and writes freed memory (or faults) once b is released: by Release,
// Close, ToDLPack*, or by the finaliser when b became unreachable. It is safe
// only under this rule: no Release, Close or ToDLPack* of b can run (on any
// goroutine) before the last use of the slice, and b stays reachable until
// then (runtime.KeepAlive(b) after the last use). Prefer WithBytes or a
// typed view, which enforce the rule. Do not write it when ReadOnly.
// Errors: ErrUnsupportedDevice for device memory, ErrClosed once released.
func (b *Buffer) Bytes() ([]byte, error) {
	const op = "hurray.Buffer.Bytes"
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return nil, closedErr(op)
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

// view runs f on the host memory b spans (base NULL when n is 0) while
// holding a reader mark: Release, Close and ToDLPack* of b wait until f
// returns, and b stays reachable. want, when not nil, is the dtype f
// expects; size is its element size in bytes (1 for raw bytes), and base
// and n must be multiples of it. f's error is returned as it is.
func (b *Buffer) view(op string, want *DType, size uintptr, f func(base unsafe.Pointer, n int) error) error {
	b.mu.Lock()
	if b.blk == 0 {
		b.mu.Unlock()
		return closedErr(op)
	}
	if want != nil {
		got := DType{Code: uint8(b.meta.code), Bits: uint8(b.meta.bits), Lanes: uint16(b.meta.lanes)}
		if got != *want {
			b.mu.Unlock()
			return &Error{Op: op, Status: ErrUnsupportedDType, Message: "the Buffer's dtype is " + got.String() + ", not " + want.String()}
		}
	}
	r := C.hgo_bytes(b.blk, b.i)
	if r.status != 0 {
		b.mu.Unlock()
		return result(op, r.status, r.msg)
	}
	if uintptr(r.base)%size != 0 || uintptr(r.len)%size != 0 {
		b.mu.Unlock()
		return &Error{Op: op, Status: ErrInvalidArgument, Message: "the memory is not aligned to its element size"}
	}
	b.readers++
	b.mu.Unlock()
	defer b.endView()
	return f(r.base, int(r.len))
}

// endView drops a reader mark and wakes waiting releases after the last one.
func (b *Buffer) endView() {
	b.mu.Lock()
	b.readers--
	if b.readers == 0 && b.drain != nil {
		close(b.drain)
		b.drain = nil
	}
	b.mu.Unlock()
	runtime.KeepAlive(b)
}

// typedView is view for elements of type T and dtype want.
func typedView[T any](b *Buffer, op string, want DType, f func([]T) error) error {
	var zero T
	size := unsafe.Sizeof(zero)
	return b.view(op, &want, size, func(base unsafe.Pointer, n int) error {
		if n == 0 {
			return f([]T{})
		}
		return f(unsafe.Slice((*T)(base), n/int(size)))
	})
}

// WithBytes calls f with the host memory b spans (CPU and pinned host
// types; as Bytes, without copying; empty, non-nil for an empty tensor) and
// returns f's error. While f runs, b cannot be released: Release, Close and
// ToDLPack* on other goroutines wait until f returns, and the finaliser
// cannot run. The slice must not be used after f returns, and f must not
// Release, Close or export b itself (that would wait for f: a deadlock).
// Other views of b may run at the same time, on any goroutines. Do not
// write the slice when ReadOnly. The slice spans the tensor's extent: for a
// strided tensor index it with Strides. Errors (f not called):
// ErrClosed once released, ErrUnsupportedDevice for device memory.
func (b *Buffer) WithBytes(f func([]byte) error) error {
	return b.view("hurray.Buffer.WithBytes", nil, 1, func(base unsafe.Pointer, n int) error {
		if n == 0 {
			return f([]byte{})
		}
		return f(unsafe.Slice((*byte)(base), n))
	})
}

// WithFloat32s is WithBytes for a Float32 Buffer, as []float32 (elements in
// memory order, native byte order). Errors (f not called): as WithBytes,
// and ErrUnsupportedDType for another dtype, ErrInvalidArgument when the
// memory is not aligned to 4 bytes.
func (b *Buffer) WithFloat32s(f func([]float32) error) error {
	return typedView(b, "hurray.Buffer.WithFloat32s", Float32, f)
}

// WithFloat64s is WithFloat32s for a Float64 Buffer, as []float64 (8-byte
// alignment).
func (b *Buffer) WithFloat64s(f func([]float64) error) error {
	return typedView(b, "hurray.Buffer.WithFloat64s", Float64, f)
}

// WithInt32s is WithFloat32s for an Int32 Buffer, as []int32.
func (b *Buffer) WithInt32s(f func([]int32) error) error {
	return typedView(b, "hurray.Buffer.WithInt32s", Int32, f)
}

// WithInt64s is WithFloat32s for an Int64 Buffer, as []int64 (8-byte
// alignment).
func (b *Buffer) WithInt64s(f func([]int64) error) error {
	return typedView(b, "hurray.Buffer.WithInt64s", Int64, f)
}

// WithUint8s is WithBytes for a Uint8 Buffer only (ErrUnsupportedDType for
// another dtype); WithBytes takes any dtype.
func (b *Buffer) WithUint8s(f func([]uint8) error) error {
	return typedView(b, "hurray.Buffer.WithUint8s", Uint8, f)
}
