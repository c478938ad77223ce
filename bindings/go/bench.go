// SPDX-License-Identifier: Apache-2.0

package hurray

// #include "hurray_go.h"
import "C"

// cgoNoop makes one cgo call to a C function that does nothing: the unit
// the benchmarks compare Share(1)+Release against (export_test.go).
func cgoNoop() { C.hgo_noop() }
