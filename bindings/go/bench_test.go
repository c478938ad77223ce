// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"testing"

	hurray "github.com/libhurray/libhurray/bindings/go"
)

// BenchmarkCgoNoop is one empty cgo call: the unit of BenchmarkShare1Release
// (docs/performance.md, Go).
func BenchmarkCgoNoop(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		hurray.CgoNoop()
	}
}

// BenchmarkShare1Release is one Share(1) of a live Buffer and the Release of
// the share: the binding's per-pair cost (target: at most 4 cgo calls, no
// Go allocation).
func BenchmarkShare1Release(b *testing.B) {
	src, err := hurray.Alloc(hurray.Float32, []int64{4}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Release()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := src.Share(1)
		if err != nil {
			b.Fatal(err)
		}
		s[0].Release()
	}
}

// BenchmarkShareOneRelease is BenchmarkShare1Release through ShareOne, which
// returns the Buffer without a slice.
func BenchmarkShareOneRelease(b *testing.B) {
	src, err := hurray.Alloc(hurray.Float32, []int64{4}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Release()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := src.ShareOne()
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

// BenchmarkShareIntoRelease is the pair through ShareInto and a reusable
// Buffer (NewBuffer): no Go allocation and no finaliser call per pair.
func BenchmarkShareIntoRelease(b *testing.B) {
	src, err := hurray.Alloc(hurray.Float32, []int64{4}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Release()
	dst := hurray.NewBuffer()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := src.ShareInto(dst); err != nil {
			b.Fatal(err)
		}
		dst.Release()
	}
}
