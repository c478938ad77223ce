// SPDX-License-Identifier: Apache-2.0

// Package nativeendian is the byte order of the machine the program runs
// on, in which tensor memory holds its elements (docs/impl/go.md: typed
// views and Bytes() are in native byte order). encoding/binary's
// NativeEndian does this from Go 1.21; the module builds with Go 1.19.
package nativeendian

import (
	"encoding/binary"
	"unsafe"
)

// Order is binary.LittleEndian on x86-64 and aarch64, binary.BigEndian on
// s390x: what the first byte of a uint16 holding 1 says.
var Order binary.ByteOrder = func() binary.ByteOrder {
	one := uint16(1)
	if *(*byte)(unsafe.Pointer(&one)) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}()
