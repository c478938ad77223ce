package hurray

// #include "hurray_go.h"
import "C"

import "unsafe"

// FromDLPackVersioned takes a C DLManagedTensorVersioned (t) from another
// runtime. On success the Buffer owns it: its deleter runs exactly once,
// when the last Buffer sharing it is released. On error the caller still
// owns t (nothing was called on it).
func FromDLPackVersioned(t unsafe.Pointer) (*Buffer, error) {
	var h C.hurray_buffer
	var msg errBuf
	if err := check("hurray.FromDLPackVersioned", C.hgo_from_dlpack_versioned(t, &h, msg.ptr()), &msg); err != nil {
		return nil, err
	}
	return wrap(h), nil
}

// FromDLPack is FromDLPackVersioned for a legacy C DLManagedTensor.
func FromDLPack(t unsafe.Pointer) (*Buffer, error) {
	var h C.hurray_buffer
	var msg errBuf
	if err := check("hurray.FromDLPack", C.hgo_from_dlpack(t, &h, msg.ptr()), &msg); err != nil {
		return nil, err
	}
	return wrap(h), nil
}

// ToDLPackVersioned hands the Buffer's reference on as a C
// DLManagedTensorVersioned for another runtime: on success b is released
// (its handle moved into the tensor) and the caller owns the tensor, whose
// deleter must be called once. To keep using the memory in Go, Share first
// and export one of the shares. On error b is unchanged.
func (b *Buffer) ToDLPackVersioned() (unsafe.Pointer, error) {
	return b.export("hurray.Buffer.ToDLPackVersioned", true)
}

// ToDLPack is ToDLPackVersioned as a legacy DLManagedTensor (flags, READ_ONLY
// included, cannot be expressed there and are dropped).
func (b *Buffer) ToDLPack() (unsafe.Pointer, error) {
	return b.export("hurray.Buffer.ToDLPack", false)
}

func (b *Buffer) export(op string, versioned bool) (unsafe.Pointer, error) {
	var t unsafe.Pointer
	var msg errBuf
	b.mu.Lock()
	if b.h.release_fn == nil {
		b.mu.Unlock()
		return nil, released(op)
	}
	var st C.int32_t
	if versioned {
		st = C.hgo_to_dlpack_versioned(&b.h, &t, msg.ptr())
	} else {
		st = C.hgo_to_dlpack(&b.h, &t, msg.ptr())
	}
	b.mu.Unlock()
	if err := check(op, st, &msg); err != nil {
		return nil, err
	}
	return t, nil
}
