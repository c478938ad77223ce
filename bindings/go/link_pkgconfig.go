// SPDX-License-Identifier: Apache-2.0

//go:build !hurray_no_pkgconfig

package hurray

// libhurray's headers and library come from pkg-config (the hurray.pc of an
// install: set PKG_CONFIG_PATH=<prefix>/lib/pkgconfig). Build with
// -tags hurray_no_pkgconfig to give them in CGO_CFLAGS/CGO_LDFLAGS instead.

// #cgo pkg-config: hurray
import "C"
