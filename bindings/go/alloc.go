// SPDX-License-Identifier: Apache-2.0

package hurray

// #include "hurray_go.h"
import "C"

// Alloc allocates uninitialised CPU memory for a tensor of the given element
// type and shape (compact row-major, 64-byte aligned), as one Buffer whose
// release frees it. readOnly sets the READ_ONLY flag. Errors are *Error
// values with libhurray's status (ErrInvalidArgument for a negative extent,
// ErrUnsupportedDType, ErrOverflow, ErrOutOfMemory). In checking mode the
// handle is labelled with the caller's file:line (CheckLive).
func Alloc(dtype DType, shape []int64, readOnly bool) (*Buffer, error) {
	var p *C.int64_t
	if len(shape) > 0 {
		p = (*C.int64_t)(&shape[0])
	}
	var flags C.uint64_t
	if readOnly {
		flags = flagReadOnly
	}
	r := C.hgo_alloc(C.int32_t(dtype.Code), C.int32_t(dtype.Bits), C.int32_t(dtype.Lanes),
		C.int32_t(len(shape)), p, flags)
	if err := result("hurray.Alloc", r.status, r.msg); err != nil {
		return nil, err
	}
	labelSlots(r.blk, 0, 0, "hurray.Alloc", 1)
	return wrap(&r, 0), nil
}
