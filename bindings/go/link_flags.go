// SPDX-License-Identifier: Apache-2.0

//go:build hurray_no_pkgconfig

package hurray

// With -tags hurray_no_pkgconfig, libhurray's headers and library come from
// the environment: CGO_CFLAGS="-I<prefix>/include" and
// CGO_LDFLAGS="-L<prefix>/lib".

// #cgo LDFLAGS: -lhurray
import "C"
