// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"errors"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/testprod"
)

var _ io.Closer = (*hurray.Buffer)(nil)

// Close releases once, returns nil the first time and ErrClosed after; the
// released Buffer refuses every operation with ErrClosed.
func TestCloseIsIOCloser(t *testing.T) {
	testprod.Reset()
	b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{3}, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times after Close, want 1", n)
	}
	err = b.Close()
	if !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	b.Release() // still a no-op
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times, want 1", n)
	}
	for name, err := range map[string]error{
		"WithBytes":    b.WithBytes(func([]byte) error { t.Error("f called"); return nil }),
		"WithFloat32s": b.WithFloat32s(func([]float32) error { t.Error("f called"); return nil }),
	} {
		if !errors.Is(err, hurray.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// There is no non-nil error value meaning success: Status 0 is not exported.
func TestNoOKError(t *testing.T) {
	var err error = hurray.ErrClosed
	if err == nil || hurray.ErrClosed != hurray.ErrReleased {
		t.Fatal("ErrClosed is not ErrReleased")
	}
}

// WithBytes and the typed views see the memory; wrong dtype and device are
// refused with exact codes and f is not called.
func TestTypedViews(t *testing.T) {
	b, err := hurray.Alloc(hurray.Float32, []int64{2, 3}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.WithFloat32s(func(v []float32) error {
		if len(v) != 6 {
			t.Fatalf("len %d, want 6", len(v))
		}
		for i := range v {
			v[i] = float32(i) + 0.5
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var sum float32
	if err := b.WithFloat32s(func(v []float32) error {
		for _, x := range v {
			sum += x
		}
		return nil
	}); err != nil || sum != 18 {
		t.Fatalf("sum %v err %v, want 18", sum, err)
	}
	if err := b.WithBytes(func(raw []byte) error {
		if len(raw) != 24 {
			t.Fatalf("WithBytes len %d, want 24", len(raw))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mine := errors.New("mine")
	if err := b.WithBytes(func([]byte) error { return mine }); err != mine {
		t.Fatalf("f's error came back as %v", err)
	}
	called := false
	err = b.WithInt64s(func([]int64) error { called = true; return nil })
	wantStatus(t, "WithInt64s of float32", err, hurray.ErrUnsupportedDType)
	err = b.WithFloat64s(func([]float64) error { called = true; return nil })
	wantStatus(t, "WithFloat64s of float32", err, hurray.ErrUnsupportedDType)
	if called {
		t.Fatal("a refused view called f")
	}
	for _, c := range []struct {
		dt   hurray.DType
		view func(*hurray.Buffer) error
	}{
		{hurray.Int32, func(b *hurray.Buffer) error {
			return b.WithInt32s(func(v []int32) error { return lenIs(len(v), 5) })
		}},
		{hurray.Int64, func(b *hurray.Buffer) error {
			return b.WithInt64s(func(v []int64) error { return lenIs(len(v), 5) })
		}},
		{hurray.Float64, func(b *hurray.Buffer) error {
			return b.WithFloat64s(func(v []float64) error { return lenIs(len(v), 5) })
		}},
		{hurray.Uint8, func(b *hurray.Buffer) error {
			return b.WithUint8s(func(v []uint8) error { return lenIs(len(v), 5) })
		}},
	} {
		x, err := hurray.Alloc(c.dt, []int64{5}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.view(x); err != nil {
			t.Errorf("%v view: %v", c.dt, err)
		}
		x.Release()
	}
	empty, err := hurray.Alloc(hurray.Float32, []int64{0}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Release()
	if err := empty.WithFloat32s(func(v []float32) error {
		if v == nil || len(v) != 0 {
			t.Fatalf("empty view %v", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func lenIs(got, want int) error {
	if got != want {
		return errors.New("wrong length")
	}
	return nil
}

// A view of device memory is refused (ErrUnsupportedDevice) and of
// misaligned memory too (ErrInvalidArgument): testprod's odd handles.
func TestViewRefusals(t *testing.T) {
	testprod.Reset()
	dev, err := hurray.FromDLPackVersioned(testprod.MakeDevice())
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Release()
	err = dev.WithBytes(func([]byte) error { t.Error("f called"); return nil })
	wantStatus(t, "WithBytes of device memory", err, hurray.ErrUnsupportedDevice)
	mis, err := hurray.FromDLPackVersioned(testprod.MakeMisaligned())
	if err != nil {
		t.Fatal(err)
	}
	defer mis.Release()
	err = mis.WithFloat32s(func([]float32) error { t.Error("f called"); return nil })
	wantStatus(t, "WithFloat32s of misaligned memory", err, hurray.ErrInvalidArgument)
	if err := mis.WithBytes(func(raw []byte) error { return lenIs(len(raw), 8) }); err != nil {
		t.Fatalf("WithBytes of misaligned memory: %v", err)
	}
}

// A Release (and a Close, and an export) racing a running WithBytes waits:
// the callback reads valid memory to its end, and the memory's release
// runs after the callback returned.
func TestReleaseWaitsForWithBytes(t *testing.T) {
	for round := 0; round < 20; round++ {
		testprod.Reset()
		b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{1024}, 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		var inside, returned atomic.Bool
		entered := make(chan struct{})
		released := make(chan int64, 1)
		var sawDeleter int64 = -1
		go func() {
			<-entered
			switch round % 3 {
			case 0:
				b.Release()
			case 1:
				_ = b.Close()
			default:
				if tensor, err := b.ToDLPackVersioned(); err == nil {
					testprod.Delete(tensor)
				}
			}
			if !returned.Load() {
				t.Error("the release returned while WithBytes ran")
			}
			released <- testprod.DeleterCalls()
		}()
		err = b.WithFloat32s(func(v []float32) error {
			inside.Store(true)
			close(entered)
			for k := 0; k < 5; k++ {
				time.Sleep(2 * time.Millisecond)
				runtime.GC()
				for i, x := range v {
					if x != float32(i+1) {
						t.Errorf("round %d: v[%d] = %v inside WithBytes", round, i, x)
						return nil
					}
				}
			}
			sawDeleter = testprod.DeleterCalls()
			returned.Store(true)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := <-released; n != 1 {
			t.Fatalf("round %d: deleter ran %d times after the release, want 1", round, n)
		}
		if sawDeleter != 0 {
			t.Fatalf("round %d: the deleter ran (%d) while WithBytes ran", round, sawDeleter)
		}
	}
}
