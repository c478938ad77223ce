package hurray

// #include "hurray_go.h"
import "C"

// Alloc allocates uninitialised CPU memory for a tensor of the given element
// type and shape (compact row-major, 64-byte aligned), as one Buffer whose
// release frees it. readOnly sets the READ_ONLY flag.
func Alloc(dtype DType, shape []int64, readOnly bool) (*Buffer, error) {
	var h C.hurray_buffer
	var msg errBuf
	var p *C.int64_t
	if len(shape) > 0 {
		p = (*C.int64_t)(&shape[0])
	}
	var flags C.uint64_t
	if readOnly {
		flags = flagReadOnly
	}
	st := C.hgo_alloc(C.int32_t(dtype.Code), C.int32_t(dtype.Bits), C.int32_t(dtype.Lanes),
		C.int32_t(len(shape)), p, flags, &h, msg.ptr())
	if err := check("hurray.Alloc", st, &msg); err != nil {
		return nil, err
	}
	return wrap(h), nil
}
