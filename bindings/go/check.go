// SPDX-License-Identifier: Apache-2.0

package hurray

// #include <stdlib.h>
// #include "hurray_go.h"
import "C"

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// checkOn is whether libhurray's checking mode was on when the package was
// initialised (HURRAY_CHECK=1 or =stderr in the environment when libhurray
// was loaded): then each Buffer's handle is labelled with the Go call that
// made it.
var checkOn = C.hgo_check_on() != 0

// CheckEnabled reports whether libhurray's checking mode was on when the
// package was initialised (HURRAY_CHECK=1 or =stderr in the environment).
func CheckEnabled() bool { return checkOn }

// CheckEntry is one live handle that libhurray's checking mode tracks
// (hurray_check_entry).
type CheckEntry struct {
	ID     uint64  // the handle's id (1, 2, ...; never reused)
	MadeBy string  // the libhurray function that made it ("hurray_alloc")
	Label  string  // for a Buffer made by this package: "file.go:line hurray.Alloc"
	Origin string  // C backtrace of where it was made, one frame per line ("" if none)
	Data   uintptr // the handle's data address (a number: the memory may be gone)
	Device Device
	DType  DType
	NDim   int32
}

// CheckLive returns the handles the checking mode tracks that are still
// live, in id order (a snapshot; empty when the mode is off and was never
// on). Safe from any goroutine. Errors: ErrOutOfMemory when the list could
// not be copied.
func CheckLive() ([]CheckEntry, error) {
	r := C.hgo_check_live(0)
	if err := result("hurray.CheckLive", r.status, r.msg); err != nil {
		return nil, err
	}
	defer C.hgo_check_free(r.items, r.n)
	if r.n == 0 {
		return []CheckEntry{}, nil
	}
	items := unsafe.Slice(r.items, int(r.n))
	out := make([]CheckEntry, len(items))
	for k := range items {
		it := &items[k]
		out[k] = CheckEntry{
			ID:     uint64(it.id),
			MadeBy: C.GoString(it.made_by),
			Label:  C.GoString(it.label),
			Origin: C.GoString(it.origin),
			Data:   uintptr(it.data),
			Device: Device{Type: int32(it.device_type), ID: int32(it.device_id)},
			DType:  DType{Code: uint8(it.code), Bits: uint8(it.bits), Lanes: uint16(it.lanes)},
			NDim:   int32(it.ndim),
		}
	}
	return out, nil
}

// WriteCheckReport writes the report of CheckLive's handles to w, one
// paragraph per handle (id, label, what made it, dtype, device, data, C
// origin), and returns how many were live. It writes nothing when none is.
func WriteCheckReport(w io.Writer) (int, error) {
	live, err := CheckLive()
	if err != nil {
		_, werr := fmt.Fprintf(w, "hurray: no leak report: %v\n", err)
		if werr != nil {
			return 0, werr
		}
		return 0, err
	}
	if len(live) == 0 {
		return 0, nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "hurray: %d handle(s) still live (checking mode leak report):\n", len(live))
	for _, e := range live {
		label := e.Label
		if label == "" {
			label = "(no label)"
		}
		fmt.Fprintf(&sb, "  handle %d: %s, made by %s: %s, ndim %d, device %d:%d, data 0x%x\n",
			e.ID, label, e.MadeBy, e.DType, e.NDim, e.Device.Type, e.Device.ID, e.Data)
		for _, fr := range strings.Split(strings.TrimSpace(e.Origin), "\n") {
			if fr != "" {
				sb.WriteString("      at " + fr + "\n")
			}
		}
	}
	_, err = io.WriteString(w, sb.String())
	return len(live), err
}

// CheckReport writes the leak report (WriteCheckReport) to standard error
// and returns the number of live handles. A Go program exits without
// running C atexit handlers (a binary built with -race aside: it exits
// through the C library), so libhurray's own at-exit report
// (HURRAY_CHECK=stderr) does not print: call this instead, as the first
// line of main:
//
//	defer hurray.CheckReport()
//
// (deferred calls do not run on os.Exit or log.Fatal). Handles only appear
// while the checking mode is on (HURRAY_CHECK=1); otherwise it prints
// nothing and returns 0. With HURRAY_CHECK=stderr it then writes the
// summary line that libhurray's at-exit report ends with, also when nothing
// is live:
//
//	hurray check: 0 handle(s) still live at exit, 0 double release(s) caught
//
// With HURRAY_CHECK=1 it prints nothing when nothing is live. Release what
// you still hold before it runs, or the report lists it.
func CheckReport() int {
	n, err := WriteCheckReport(os.Stderr)
	var doubles C.uint64_t
	if err == nil && C.hgo_check_stderr(&doubles) != 0 {
		fmt.Fprintf(os.Stderr, "hurray check: %d handle(s) still live at exit, %d double release(s) caught\n",
			n, uint64(doubles))
	}
	return n
}

// labelSlots labels slots first..last of blk with the Go call site skip
// frames above labelSlots' caller and the operation op, when the checking
// mode is on.
func labelSlots(blk C.hgo_ref, first, last C.size_t, op string, skip int) {
	if !checkOn {
		return
	}
	label := op
	if _, file, line, ok := runtime.Caller(skip + 1); ok {
		label = file + ":" + strconv.Itoa(line) + " " + op
	}
	cs := C.CString(label)
	C.hgo_check_label(blk, first, last, cs)
	C.free(unsafe.Pointer(cs))
}
