// SPDX-License-Identifier: Apache-2.0

package hurray

// #include <stdlib.h>
// #include "hurray_go.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// Status is a libhurray status code (hurray_status). It is an error itself,
// so errors.Is(err, ErrOverflow) tests the code of an *Error.
type Status int32

// The failure codes of hurray.h (c-ffi §2). HURRAY_OK (0) has no constant:
// a nil error is success, and no non-nil error value means "no error".
const (
	ErrInvalidArgument    Status = 1
	ErrUnsupportedVersion Status = 2
	ErrUnsupportedDType   Status = 3
	ErrUnsupportedDevice  Status = 4
	ErrOutOfMemory        Status = 5
	ErrOverflow           Status = 6
	ErrDevice             Status = 7
	ErrInternal           Status = 8
	ErrReleased           Status = 9  // the Buffer (or, in checking mode, the handle) was already released
	ErrLeaked             Status = 10 // checking mode: reported for a handle live at exit
	ErrIPC                Status = 11 // cross-process: a malformed or refused message, a failed socket call
	ErrIPCClosed          Status = 12 // cross-process: the peer closed the connection
	ErrIPCTimeout         Status = 13 // cross-process: no message began in time; nothing consumed
)

// ErrClosed is the status of every operation on a Buffer already released,
// closed or handed on (ToDLPack*): errors.Is(err, hurray.ErrClosed) is true
// for it. It is ErrReleased (HURRAY_ERR_RELEASED) under the io.Closer name.
const ErrClosed = ErrReleased

// String returns libhurray's name of the code ("HURRAY_ERR_OVERFLOW").
func (s Status) String() string { return C.GoString(C.hgo_status_name(C.int32_t(s))) }

// Error makes a Status usable as an error value (for errors.Is).
func (s Status) Error() string { return s.String() }

// Error is a failed libhurray call: the operation, the status code and
// libhurray's message for that call (hurray_last_error, captured on the
// calling thread).
type Error struct {
	Op      string // the Go function, e.g. "hurray.Alloc"
	Status  Status
	Message string
}

// Error formats as "op: message [STATUS_NAME]".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s [%s]", e.Op, e.Message, e.Status)
}

// Is reports whether target is this error's Status.
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// result turns a wrapper's status into nil or an *Error carrying its
// message, and frees the message (C memory, NULL on success or when even
// the copy could not be allocated: then the status name stands in).
func result(op string, status C.int32_t, msg *C.char) error {
	if status == 0 {
		return nil
	}
	e := &Error{Op: op, Status: Status(status)}
	if msg != nil {
		e.Message = C.GoString(msg)
		C.free(unsafe.Pointer(msg))
	} else {
		e.Message = e.Status.String()
	}
	return e
}

// closedErr is the error of an operation on a Buffer already released,
// closed or handed on.
func closedErr(op string) error {
	return &Error{Op: op, Status: ErrClosed, Message: "the Buffer is released"}
}
