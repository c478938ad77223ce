// SPDX-License-Identifier: Apache-2.0

// Package hurray is the Go binding of libhurray: it holds, shares and hands
// on tensor memory described by a hurray_buffer handle, whose release
// callback runs exactly once, from any thread (ADR-009).
//
// Import it as
//
//	import hurray "github.com/libhurray/libhurray/bindings/go"
//
// A *Buffer owns one handle. Close (io.Closer; prefer it, defer b.Close())
// or Release gives it back; only the first call releases, and every use
// after it returns an error for which errors.Is(err, ErrClosed) is true. Share hands out more Buffers of the same memory; the
// memory's own release (the producer's DLPack deleter, the allocation's free)
// runs once, after the last of them is released, on the goroutine that
// releases last. FromDLPack and FromDLPackVersioned take a C DLPack tensor
// from another runtime; ToDLPack and ToDLPackVersioned hand a Buffer on as
// one. A finaliser releases a Buffer that was dropped without Release: it is
// a safety net only (FinalizerReleases counts how often it was needed).
//
// Sets of tensors: FromDLPackVersionedN and FromDLPackN take a slice of C
// tensors, ToDLPackVersionedN and ToDLPackN hand a slice of Buffers on, in
// one call each, all or nothing; AllocGroup makes one Buffer per TensorDesc
// in one allocation (each GroupAlignment-aligned), freed once after the
// last of them is released. A failed batch changes nothing and returns a
// *BatchError whose Index names the element at fault.
//
// WithBytes and the typed views (WithFloat32s, ...) lend the memory to a
// callback during which the Buffer cannot be released; Bytes is the
// unchecked, unsafe form. CheckLive and CheckReport (defer
// hurray.CheckReport() in main) show the handles libhurray's checking mode
// (HURRAY_CHECK=1) still sees live, which Go's exit never reports.
//
// Errors from libhurray are *Error values carrying the Status code and
// libhurray's message; errors.Is(err, hurray.ErrInvalidArgument) matches a
// status.
//
// Building: cgo finds libhurray's headers and library with pkg-config, from
// the hurray.pc of an install (cmake --install ... --prefix <prefix>):
//
//	PKG_CONFIG_PATH=<prefix>/lib/pkgconfig \
//	CGO_LDFLAGS="-Wl,-rpath,<prefix>/lib" go test ./...
//
// (the rpath, or LD_LIBRARY_PATH, lets the program find the library at run
// time). Without pkg-config, build with -tags hurray_no_pkgconfig and give
// CGO_CFLAGS="-I<prefix>/include" CGO_LDFLAGS="-L<prefix>/lib".
//
// Handles are kept in C memory, never in Go memory: a producer may put any
// value in a handle's pointer-sized fields (libhurray's checking mode puts
// handle ids in user_data), and the Go runtime must not see them.
//
// See docs/impl/go.md for ownership, threads, finalisation and errors.
package hurray
