// SPDX-License-Identifier: Apache-2.0

package hurray

// #include "hurray_go.h"
import "C"

import (
	"unsafe"
)

// FromDLPackVersioned takes a C DLManagedTensorVersioned (t) from another
// runtime. On success the Buffer owns it: its deleter runs exactly once,
// when the last Buffer sharing it is released. On error the caller still
// owns t (nothing was called on it).
func FromDLPackVersioned(t unsafe.Pointer) (*Buffer, error) {
	return importTensor("hurray.FromDLPackVersioned", t, 1)
}

// FromDLPack is FromDLPackVersioned for a legacy C DLManagedTensor.
func FromDLPack(t unsafe.Pointer) (*Buffer, error) {
	return importTensor("hurray.FromDLPack", t, 0)
}

// importTensor takes tensor t (versioned 1: DLManagedTensorVersioned, 0:
// legacy) into a new Buffer of one slot.
func importTensor(op string, t unsafe.Pointer, versioned C.int32_t) (*Buffer, error) {
	r := C.hgo_from_dlpack(t, versioned)
	if err := result(op, r.status, r.msg); err != nil {
		return nil, err
	}
	labelSlots(r.blk, 0, 0, op, 2)
	return wrap(&r, 0), nil
}

// ToDLPackVersioned hands the Buffer's reference on as a C
// DLManagedTensorVersioned for another runtime: on success b is released
// (its handle moved into the tensor) and the caller owns the tensor, whose
// deleter must be called once. To keep using the memory in Go, Share first
// and export one of the shares. It waits for scoped views (WithBytes, ...)
// running on other goroutines. Errors: ErrClosed once released or handed
// on; libhurray's statuses. On error b is unchanged.
func (b *Buffer) ToDLPackVersioned() (unsafe.Pointer, error) {
	return b.export("hurray.Buffer.ToDLPackVersioned", 1)
}

// ToDLPack is ToDLPackVersioned as a legacy DLManagedTensor (flags, READ_ONLY
// included, cannot be expressed there and are dropped).
func (b *Buffer) ToDLPack() (unsafe.Pointer, error) {
	return b.export("hurray.Buffer.ToDLPack", 0)
}

// export waits for running scoped views (the tensor's consumer may free the
// memory at once), then moves the handle into a tensor.
func (b *Buffer) export(op string, versioned C.int32_t) (unsafe.Pointer, error) {
	b.lockIdle()
	if b.blk == 0 {
		b.mu.Unlock()
		return nil, closedErr(op)
	}
	var keep C.int32_t
	if b.blk == b.own {
		keep = 1
	}
	r := C.hgo_to_dlpack(b.blk, b.i, versioned, keep)
	if r.status == 0 {
		b.blk = 0 // the slot was dropped: its handle is in the tensor now
		b.disarm()
	}
	b.mu.Unlock()
	if err := result(op, r.status, r.msg); err != nil {
		return nil, err
	}
	return r.tensor, nil
}
