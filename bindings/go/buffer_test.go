// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"errors"
	"math"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/nativeendian"
	"github.com/libhurray/libhurray/bindings/go/internal/testprod"
)

// must returns a function that fails t on a non-nil error and returns the
// value otherwise.
func must(t *testing.T) func([]int64, error) []int64 {
	return func(v []int64, err error) []int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func floats(t *testing.T, b *hurray.Buffer) []float32 {
	t.Helper()
	raw, err := b.Bytes()
	if err != nil {
		t.Fatalf("Bytes: %v", err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(nativeendian.Order.Uint32(raw[4*i:]))
	}
	runtime.KeepAlive(b)
	return out
}

// Share to 64, release from 8 goroutines in random order, repeated: the C
// deleter runs once, after every release began.
func TestShareReleaseExactlyOnceAcrossGoroutines(t *testing.T) {
	for round := 0; round < 50; round++ {
		testprod.Reset()
		b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{256}, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		more, err := b.Share(63)
		if err != nil {
			t.Fatal(err)
		}
		all := append([]*hurray.Buffer{b}, more...)
		if len(all) != 64 {
			t.Fatalf("got %d buffers", len(all))
		}
		rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := g; i < len(all); i += 8 {
					if rand.Intn(4) == 0 {
						runtime.Gosched()
					}
					testprod.NoteRelease()
					all[i].Release()
					all[i].Release() // idempotent
				}
			}(g)
		}
		wg.Wait()
		if n := testprod.DeleterCalls(); n != 1 {
			t.Fatalf("round %d: deleter ran %d times, want 1", round, n)
		}
		if n := testprod.NotesAtDelete(); n != 64 {
			t.Fatalf("round %d: deleter ran after %d of 64 releases began, want 64", round, n)
		}
	}
}

// Two goroutines releasing the same Buffer release it once.
func TestReleaseSameBufferConcurrently(t *testing.T) {
	for round := 0; round < 100; round++ {
		testprod.Reset()
		b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{4}, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() { defer wg.Done(); b.Release() }()
		}
		wg.Wait()
		if n := testprod.DeleterCalls(); n != 1 || !b.Released() {
			t.Fatalf("deleter ran %d times (released=%v)", n, b.Released())
		}
	}
}

func TestTensorFromCReleasedThroughGo(t *testing.T) {
	testprod.Reset()
	b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{2, 3}, 10, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := must(t)(b.Shape()); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Shape = %v", got)
	}
	if got := must(t)(b.Strides()); len(got) != 2 || got[0] != 3 || got[1] != 1 {
		t.Fatalf("Strides = %v", got)
	}
	dt, _ := b.DType()
	dev, _ := b.Device()
	if dt != hurray.Float32 || dev != (hurray.Device{Type: hurray.DeviceCPU}) || b.ReadOnly() {
		t.Fatalf("DType %v Device %v ReadOnly %v", dt, dev, b.ReadOnly())
	}
	if got := floats(t, b); len(got) != 6 || got[0] != 10 || got[5] != 15 {
		t.Fatalf("contents %v", got)
	}
	if testprod.DeleterCalls() != 0 {
		t.Fatal("deleter ran before Release")
	}
	b.Release()
	b.Release()
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times", n)
	}
	// Every accessor of a released Buffer says so with ErrClosed.
	if shape, err := b.Shape(); shape != nil || !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("Shape of a released Buffer: %v, %v", shape, err)
	}
	if st, err := b.Strides(); st != nil || !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("Strides of a released Buffer: %v, %v", st, err)
	}
	if dt, err := b.DType(); dt != (hurray.DType{}) || !errors.Is(err, hurray.ErrClosed) || !errors.Is(err, hurray.ErrReleased) {
		t.Fatalf("DType of a released Buffer: %v, %v", dt, err)
	}
	if dev, err := b.Device(); dev != (hurray.Device{}) || !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("Device of a released Buffer: %v, %v", dev, err)
	}

	legacy, err := hurray.FromDLPack(testprod.MakeLegacy([]int64{5}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := must(t)(legacy.Strides()); len(got) != 1 || got[0] != 1 {
		t.Fatalf("legacy strides %v (NULL strides read as compact)", got)
	}
	legacy.Release()
	if n := testprod.DeleterCalls(); n != 2 {
		t.Fatalf("legacy deleter: %d calls in all, want 2", n)
	}
}

func TestReadOnlyFlag(t *testing.T) {
	testprod.Reset()
	b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{3}, 0, 1 /* READ_ONLY */))
	if err != nil {
		t.Fatal(err)
	}
	if !b.ReadOnly() {
		t.Fatal("READ_ONLY flag lost")
	}
	b.Release()
	a, err := hurray.Alloc(hurray.Uint8, []int64{8}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if !a.ReadOnly() {
		t.Fatal("Alloc(readOnly) is not read-only")
	}
}

// A Buffer exported from Go is consumed, and its memory released, in C.
func TestExportFromGoReleasedInC(t *testing.T) {
	a, err := hurray.Alloc(hurray.Float32, []int64{2, 3}, false)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := a.Bytes()
	if err != nil || len(raw) != 24 {
		t.Fatalf("Bytes: %d bytes, %v", len(raw), err)
	}
	for i := 0; i < 6; i++ {
		nativeendian.Order.PutUint32(raw[4*i:], math.Float32bits(float32(i+1)))
	}
	runtime.KeepAlive(a)
	tensor, err := a.ToDLPackVersioned()
	if err != nil {
		t.Fatal(err)
	}
	if !a.Released() {
		t.Fatal("ToDLPackVersioned left the Buffer live")
	}
	if _, err := a.ToDLPackVersioned(); !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("second export: %v", err)
	}
	if sum, ok := testprod.ConsumeVersioned(tensor); !ok || sum != 21 {
		t.Fatalf("C read sum %v ok %v, want 21", sum, ok)
	}

	// A C tensor through Go and back to C: its own deleter runs once, in C.
	testprod.Reset()
	b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{4}, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	more, err := b.Share(1)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := more[0].ToDLPack()
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	if testprod.DeleterCalls() != 0 {
		t.Fatal("deleter ran while C still held a share")
	}
	if sum, ok := testprod.ConsumeLegacy(legacy); !ok || sum != 10 {
		t.Fatalf("C read sum %v ok %v, want 10", sum, ok)
	}
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times", n)
	}
}

func TestFinalizerReleasesDroppedBuffer(t *testing.T) {
	testprod.Reset()
	before := hurray.FinalizerReleases()
	func() {
		b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{16}, 0, 0))
		if err != nil {
			t.Error(err)
		}
		_ = b // dropped without Release
	}()
	deadline := time.Now().Add(10 * time.Second)
	for testprod.DeleterCalls() == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times after GC, want 1", n)
	}
	if got := hurray.FinalizerReleases() - before; got != 1 {
		t.Fatalf("FinalizerReleases grew by %d, want 1", got)
	}
}

func TestReleasedBufferHasNoFinalizerRelease(t *testing.T) {
	testprod.Reset()
	before := hurray.FinalizerReleases()
	b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{1}, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	b = nil
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	if testprod.DeleterCalls() != 1 || hurray.FinalizerReleases() != before {
		t.Fatalf("deleter %d, finaliser releases +%d", testprod.DeleterCalls(), hurray.FinalizerReleases()-before)
	}
}

func wantStatus(t *testing.T, what string, err error, want hurray.Status) {
	t.Helper()
	var he *hurray.Error
	if !errors.As(err, &he) {
		t.Fatalf("%s: error %v is not a *hurray.Error", what, err)
	}
	if he.Status != want || !errors.Is(err, want) || he.Message == "" {
		t.Fatalf("%s: got %v (status %d), want %s", what, err, he.Status, want)
	}
}

func TestErrorsCarryExactCodes(t *testing.T) {
	_, err := hurray.Alloc(hurray.Float32, []int64{2, -1}, false)
	wantStatus(t, "negative extent", err, hurray.ErrInvalidArgument)
	_, err = hurray.Alloc(hurray.DType{Code: 99, Bits: 8, Lanes: 1}, []int64{1}, false)
	wantStatus(t, "unknown dtype code", err, hurray.ErrUnsupportedDType)
	_, err = hurray.Alloc(hurray.Float64, []int64{1 << 40, 1 << 40}, false)
	wantStatus(t, "element count", err, hurray.ErrOverflow)
	_, err = hurray.FromDLPackVersioned(nil)
	wantStatus(t, "nil tensor", err, hurray.ErrInvalidArgument)
	// Every constant carries the code libhurray names as it does.
	for s, name := range map[hurray.Status]string{
		hurray.ErrInvalidArgument: "HURRAY_ERR_INVALID_ARGUMENT", hurray.ErrUnsupportedVersion: "HURRAY_ERR_UNSUPPORTED_VERSION",
		hurray.ErrUnsupportedDType: "HURRAY_ERR_UNSUPPORTED_DTYPE", hurray.ErrUnsupportedDevice: "HURRAY_ERR_UNSUPPORTED_DEVICE",
		hurray.ErrOutOfMemory: "HURRAY_ERR_OUT_OF_MEMORY", hurray.ErrOverflow: "HURRAY_ERR_OVERFLOW",
		hurray.ErrDevice: "HURRAY_ERR_DEVICE", hurray.ErrInternal: "HURRAY_ERR_INTERNAL",
		hurray.ErrReleased: "HURRAY_ERR_RELEASED", hurray.ErrLeaked: "HURRAY_ERR_LEAKED",
		hurray.ErrIPC: "HURRAY_ERR_IPC", hurray.ErrIPCClosed: "HURRAY_ERR_IPC_CLOSED",
		hurray.ErrIPCTimeout: "HURRAY_ERR_IPC_TIMEOUT",
	} {
		if s.String() != name {
			t.Errorf("status %d is named %q, want %q", int32(s), s.String(), name)
		}
	}

	// A refused tensor stays the caller's: nothing was called on it.
	testprod.Reset()
	bad := testprod.MakeVersionedMajor(2)
	_, err = hurray.FromDLPackVersioned(bad)
	wantStatus(t, "DLPack major 2", err, hurray.ErrUnsupportedVersion)
	if testprod.DeleterCalls() != 0 {
		t.Fatal("a refused tensor was deleted")
	}
	testprod.Delete(bad)
	if testprod.DeleterCalls() != 1 {
		t.Fatal("the refused tensor could not be deleted by its owner")
	}

	b, err := hurray.Alloc(hurray.Int32, []int64{3}, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Share(0)
	wantStatus(t, "Share(0)", err, hurray.ErrInvalidArgument)
	if b.Released() {
		t.Fatal("a failed Share released the Buffer")
	}
	b.Release()
	_, err = b.Share(1)
	wantStatus(t, "Share after Release", err, hurray.ErrClosed)
	_, err = b.Bytes()
	wantStatus(t, "Bytes after Release", err, hurray.ErrClosed)
	_, err = b.ToDLPack()
	wantStatus(t, "ToDLPack after Release", err, hurray.ErrClosed)
}

func TestBytesOfEmptyTensor(t *testing.T) {
	b, err := hurray.Alloc(hurray.Float32, []int64{0, 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	raw, err := b.Bytes()
	if err != nil || raw == nil || len(raw) != 0 {
		t.Fatalf("Bytes of an empty tensor: %v %v", raw, err)
	}
}

var _ = unsafe.Pointer(nil)
