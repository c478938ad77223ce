// SPDX-License-Identifier: Apache-2.0

// Package testprod exposes the C test producer of tests/dlpack_producer to the
// Go tests (cgo cannot be used in _test.go files). Test code only.
package testprod

// #cgo CFLAGS: -I${SRCDIR}/../../../../tests/dlpack_producer
// #include "dlpack_producer.h"
// #include "odd.h"
import "C"

import "unsafe"

// Reset zeroes the producer's counters.
func Reset() { C.tp_reset() }

// MakeVersioned returns a compact float32 DLManagedTensorVersioned holding
// start, start+1, ...; its deleter is counted.
func MakeVersioned(shape []int64, start float32, flags uint64) unsafe.Pointer {
	return unsafe.Pointer(C.tp_make_versioned(C.int32_t(len(shape)), ptr(shape), C.float(start), C.uint64_t(flags)))
}

// MakeLegacy is MakeVersioned as a legacy DLManagedTensor.
func MakeLegacy(shape []int64, start float32) unsafe.Pointer {
	return unsafe.Pointer(C.tp_make_legacy(C.int32_t(len(shape)), ptr(shape), C.float(start)))
}

// MakeVersionedMajor returns a 4-element tensor claiming DLPack major `major`.
func MakeVersionedMajor(major uint32) unsafe.Pointer {
	return unsafe.Pointer(C.tp_make_versioned_major(C.uint32_t(major)))
}

// DeleterCalls counts deleter calls since Reset.
func DeleterCalls() int64 { return int64(C.tp_deleter_calls()) }

// NoteRelease is called right before each consumer release.
func NoteRelease() { C.tp_note_release() }

// NotesAtDelete is the number of notes the last deleter call saw (-1: none).
func NotesAtDelete() int64 { return int64(C.tp_notes_at_delete()) }

// ConsumeVersioned sums a float32 DLManagedTensorVersioned in C and calls its
// deleter; ok is false (tensor left alone) if it was not such a tensor.
func ConsumeVersioned(t unsafe.Pointer) (sum float64, ok bool) {
	var s C.double
	r := C.tp_consume_versioned((*C.DLManagedTensorVersioned)(t), &s)
	return float64(s), r == 0
}

// ConsumeLegacy is ConsumeVersioned for a legacy DLManagedTensor.
func ConsumeLegacy(t unsafe.Pointer) (sum float64, ok bool) {
	var s C.double
	r := C.tp_consume_legacy((*C.DLManagedTensor)(t), &s)
	return float64(s), r == 0
}

// Delete calls a versioned tensor's deleter (for tensors a test still owns).
func Delete(t unsafe.Pointer) {
	v := (*C.DLManagedTensorVersioned)(t)
	C.hurray_dlpack_versioned_delete(v)
}

func ptr(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(&s[0])
}

// MakeOdd returns a versioned tensor that libhurray's import unwraps to a
// handle whose pointer-sized fields are not pointers (user_data 0x40; kind
// 0: an empty [0, 3] float32 tensor with data 0x40; kind 1: [4] float32
// holding 0..3; kind 2: a 0-d float32 holding 7 with shape 0x8 and strides
// 0x10). nil on failure. Its release is counted by OddReleases.
func MakeOdd(kind int) unsafe.Pointer { return unsafe.Pointer(C.tpg_make_odd(C.int32_t(kind))) }

// MakeDevice returns a MakeOdd tensor of float32 [4] on CUDA:0 (data never
// read); nil on failure.
func MakeDevice() unsafe.Pointer { return MakeOdd(3) }

// MakeMisaligned returns a MakeOdd float32 [2] tensor on the CPU whose data
// is not 4-byte aligned; nil on failure.
func MakeMisaligned() unsafe.Pointer { return MakeOdd(4) }

// OddReleases counts the releases of MakeOdd handles since ResetOdd.
func OddReleases() int64 { return int64(C.tpg_odd_releases()) }

// OddBadUserData counts the releases of MakeOdd handles that did not get
// user_data 0x40 since ResetOdd.
func OddBadUserData() int64 { return int64(C.tpg_odd_bad_user_data()) }

// ResetOdd zeroes the MakeOdd counters.
func ResetOdd() { C.tpg_odd_reset() }

// Data returns the data pointer of a versioned tensor (dl_tensor.data) as an
// address, for comparing with a Buffer's Bytes.
func Data(t unsafe.Pointer) uintptr {
	return uintptr(C.tpg_data((*C.DLManagedTensorVersioned)(t)))
}

// FirstByte returns the address of a versioned tensor's first byte
// (dl_tensor.data + byte_offset), for comparing with a Buffer's memory.
func FirstByte(t unsafe.Pointer) uintptr {
	return uintptr(C.tpg_first_byte((*C.DLManagedTensorVersioned)(t)))
}
