// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/testprod"
)

// ShareOne and ShareInto make references like Share(1): the producer's
// deleter runs once, after the last of them is released; ShareInto refuses
// a dst that holds a reference (nothing changes) and b itself.
func TestShareOneAndShareInto(t *testing.T) {
	testprod.Reset()
	src, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{2, 3}, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	one, err := src.ShareOne()
	if err != nil {
		t.Fatal(err)
	}
	dst := hurray.NewBuffer()
	if !dst.Released() {
		t.Fatal("NewBuffer holds a reference")
	}
	if _, err := dst.Shape(); !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("Shape of an empty NewBuffer: %v", err)
	}
	for k := 0; k < 100; k++ {
		if err := src.ShareInto(dst); err != nil {
			t.Fatal(err)
		}
		if got := floats(t, dst); len(got) != 6 || got[5] != 6 {
			t.Fatalf("ShareInto contents %v", got)
		}
		if k%2 == 0 {
			dst.Release()
		} else if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Exported and deleted in C, then filled again (its own slot block
	// survives the export).
	if err := src.ShareInto(dst); err != nil {
		t.Fatal(err)
	}
	tensor, err := dst.ToDLPackVersioned()
	if err != nil || !dst.Released() {
		t.Fatalf("export of a filled Buffer: %v", err)
	}
	if sum, ok := testprod.ConsumeVersioned(tensor); !ok || sum != 21 {
		t.Fatalf("C read sum %v ok %v, want 21", sum, ok)
	}
	if err := src.ShareInto(dst); err != nil {
		t.Fatal(err)
	}
	err = src.ShareInto(dst)
	wantStatus(t, "ShareInto a live dst", err, hurray.ErrInvalidArgument)
	wantStatus(t, "ShareInto itself", src.ShareInto(src), hurray.ErrInvalidArgument)
	// A used Buffer (not from NewBuffer) can be filled again once released.
	one.Release()
	if err := src.ShareInto(one); err != nil {
		t.Fatal(err)
	}
	src.Release()
	one.Release()
	if n := testprod.DeleterCalls(); n != 0 {
		t.Fatalf("deleter ran (%d) while dst still held a share", n)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times, want 1", n)
	}
	err = src.ShareInto(hurray.NewBuffer())
	wantStatus(t, "ShareInto from a released Buffer", err, hurray.ErrClosed)
}

// Reusable Buffers dropped while they hold a share are released by their
// finalisers, once each; one dropped empty releases nothing.
func TestFinalizerReleasesDroppedShareInto(t *testing.T) {
	testprod.Reset()
	src, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{4}, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	before := hurray.FinalizerReleases()
	func() {
		empty := hurray.NewBuffer()
		_ = empty
		dst := hurray.NewBuffer()
		if err := src.ShareInto(dst); err != nil {
			t.Error(err)
		}
		dst.Release()
		if err := src.ShareInto(dst); err != nil { // filled again, then dropped
			t.Error(err)
		}
		// A Buffer whose finaliser Release cleared gets it back when filled.
		used, err := src.ShareOne()
		if err != nil {
			t.Error(err)
			return
		}
		used.Release()
		if err := src.ShareInto(used); err != nil {
			t.Error(err)
		}
	}()
	src.Release()
	deadline := time.Now().Add(10 * time.Second)
	for testprod.DeleterCalls() == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times after GC, want 1", n)
	}
	for k := 0; k < 5; k++ {
		runtime.GC()
	}
	if got := hurray.FinalizerReleases() - before; got != 2 {
		t.Fatalf("FinalizerReleases grew by %d, want 2", got)
	}
}

// a.ShareInto(b) racing b.ShareInto(a) takes both locks in one order: no
// deadlock, and every reference made is released once.
func TestShareIntoBothWays(t *testing.T) {
	testprod.Reset()
	a, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{4}, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	b := hurray.NewBuffer()
	done := make(chan struct{})
	for g := 0; g < 2; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			x, y := a, b
			if g == 1 {
				x, y = b, a
			}
			for k := 0; k < 2000; k++ {
				_ = x.ShareInto(y) // fails unless y is empty and x live
				if k%7 == 0 && g == 0 {
					y.Release()
				}
			}
		}(g)
	}
	for g := 0; g < 2; g++ {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("ShareInto both ways deadlocked")
		}
	}
	a.Release()
	b.Release()
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times, want 1", n)
	}
}
