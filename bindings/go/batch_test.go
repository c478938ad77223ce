// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/testprod"
)

// wantBatch fails t unless err is a *BatchError at index with status and
// exactly the message msg (errors.Is and errors.As both find them).
func wantBatch(t *testing.T, err error, index int, status hurray.Status, msg string) {
	t.Helper()
	var be *hurray.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("error %v (%T) is not a *hurray.BatchError", err, err)
	}
	if be.Index != index || !errors.Is(err, status) || be.Err.Message != msg {
		t.Fatalf("got index %d, %v; want index %d, %q [%v]", be.Index, err, index, msg, status)
	}
	var he *hurray.Error
	if !errors.As(err, &he) || he != be.Err {
		t.Fatalf("errors.As does not find the *Error inside %v", err)
	}
}

// memfdMaps counts the mappings of libhurray's shareable memory (memfds
// named "hurray") in this process: a group made with shareable true is one
// memfd, mapped once, unmapped when the memory is freed.
func memfdMaps(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "memfd:hurray")
}

// dataAddr is the address of b's first byte (host memory).
func dataAddr(t *testing.T, b *hurray.Buffer) uintptr {
	t.Helper()
	var p uintptr
	if err := b.WithBytes(func(raw []byte) error {
		if len(raw) > 0 {
			p = uintptr(unsafe.Pointer(&raw[0]))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// A batch import takes every tensor or none: a bad element (a major version
// 2, a nil) fails the batch naming its index, and no deleter runs; the
// caller still owns every tensor. On success each Buffer owns its tensor
// (same memory: the pointers compare equal) and each deleter runs once, when
// its own Buffer is closed.
func TestFromDLPackVersionedNAllOrNothing(t *testing.T) {
	testprod.Reset()
	ts := []unsafe.Pointer{
		testprod.MakeVersioned([]int64{2, 2}, 1, 0),
		testprod.MakeVersionedMajor(2),
		testprod.MakeVersioned([]int64{3}, 10, 0),
	}
	_, err := hurray.FromDLPackVersionedN(ts)
	wantBatch(t, err, 1, hurray.ErrUnsupportedVersion,
		"ts[1].version is 2.3; only DLPack major version 1 can be read (the caller still owns the tensor and should call its deleter)")
	if n := testprod.DeleterCalls(); n != 0 {
		t.Fatalf("a failed batch ran %d deleters", n)
	}
	bad := ts[1]
	ts[1] = nil
	_, err = hurray.FromDLPackVersionedN(ts)
	wantBatch(t, err, 1, hurray.ErrInvalidArgument, "ts[1] is NULL")
	testprod.Delete(bad) // the caller's still: exactly one deleter call
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter calls %d, want 1", n)
	}
	ts[1] = testprod.MakeVersioned([]int64{1}, 7, 0)
	want := []uintptr{testprod.Data(ts[0]), testprod.Data(ts[1]), testprod.Data(ts[2])}
	bufs, err := hurray.FromDLPackVersionedN(ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(bufs) != 3 {
		t.Fatalf("%d Buffers for 3 tensors", len(bufs))
	}
	for i, b := range bufs {
		if got := dataAddr(t, b); got != want[i] {
			t.Fatalf("Buffer %d at %#x, tensor at %#x", i, got, want[i])
		}
	}
	if got := floats(t, bufs[2]); len(got) != 3 || got[0] != 10 || got[2] != 12 {
		t.Fatalf("bufs[2] holds %v", got)
	}
	if got := must(t)(bufs[0].Shape()); len(got) != 2 || got[0] != 2 {
		t.Fatalf("bufs[0] shape %v", got)
	}
	for k, i := range []int{2, 0, 1} {
		if err := bufs[i].Close(); err != nil {
			t.Fatal(err)
		}
		if n := testprod.DeleterCalls(); n != int64(k+2) {
			t.Fatalf("after closing bufs[%d]: %d deleter calls, want %d", i, n, k+2)
		}
	}
	if err := bufs[0].Close(); !errors.Is(err, hurray.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if got, err := hurray.FromDLPackVersionedN(nil); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty batch: %v %v", got, err)
	}
}

// The legacy form, and its refusal of a nil element.
func TestFromDLPackNLegacy(t *testing.T) {
	testprod.Reset()
	ts := []unsafe.Pointer{testprod.MakeLegacy([]int64{2}, 1), nil}
	_, err := hurray.FromDLPackN(ts)
	wantBatch(t, err, 1, hurray.ErrInvalidArgument, "ts[1] is NULL")
	ts[1] = testprod.MakeLegacy([]int64{4}, 5)
	bufs, err := hurray.FromDLPackN(ts)
	if err != nil {
		t.Fatal(err)
	}
	if got := floats(t, bufs[1]); len(got) != 4 || got[3] != 8 {
		t.Fatalf("bufs[1] holds %v", got)
	}
	for _, b := range bufs {
		b.Release()
	}
	if n := testprod.DeleterCalls(); n != 2 {
		t.Fatalf("deleter calls %d, want 2", n)
	}
}

// A batch export hands every Buffer on or none: a nil Buffer, one listed
// twice or one already closed fails it naming the index, and every Buffer
// stays open. On success every Buffer reads as released, each tensor is
// its Buffer's memory, and importing them back unwraps to the same memory;
// the producer's deleter runs once per tensor, after the last reference.
func TestToDLPackVersionedNAllOrNothing(t *testing.T) {
	testprod.Reset()
	ts := []unsafe.Pointer{
		testprod.MakeVersioned([]int64{2}, 1, 0),
		testprod.MakeVersioned([]int64{3}, 4, 0),
		testprod.MakeVersioned([]int64{1}, 9, 0),
	}
	addr := []uintptr{testprod.Data(ts[0]), testprod.Data(ts[1]), testprod.Data(ts[2])}
	bufs, err := hurray.FromDLPackVersionedN(ts)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := hurray.Alloc(hurray.Float32, []int64{1}, false)
	if err != nil {
		t.Fatal(err)
	}
	closed.Release()
	for _, c := range []struct {
		in     []*hurray.Buffer
		index  int
		status hurray.Status
		msg    string
	}{
		{[]*hurray.Buffer{bufs[0], nil, bufs[2]}, 1, hurray.ErrInvalidArgument, "bufs[1] is nil"},
		{[]*hurray.Buffer{bufs[0], bufs[1], bufs[0]}, 2, hurray.ErrInvalidArgument,
			"bufs[2] is bufs[0] again (each Buffer once)"},
		{[]*hurray.Buffer{bufs[0], bufs[1], closed}, 2, hurray.ErrClosed, "bufs[2] is released"},
	} {
		_, err := hurray.ToDLPackVersionedN(c.in)
		wantBatch(t, err, c.index, c.status, c.msg)
		for i, b := range bufs {
			if b.Released() {
				t.Fatalf("bufs[%d] released by a failed batch", i)
			}
		}
	}
	keep, err := bufs[1].ShareOne()
	if err != nil {
		t.Fatal(err)
	}
	out, err := hurray.ToDLPackVersionedN(bufs)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bufs {
		if !b.Released() {
			t.Fatalf("bufs[%d] still open after the export", i)
		}
		if _, err := b.Shape(); !errors.Is(err, hurray.ErrClosed) {
			t.Fatalf("bufs[%d].Shape after export: %v", i, err)
		}
		if got := testprod.Data(out[i]); got != addr[i] {
			t.Fatalf("tensor %d at %#x, memory at %#x", i, got, addr[i])
		}
	}
	if n := testprod.DeleterCalls(); n != 0 {
		t.Fatalf("export ran %d deleters", n)
	}
	if sum, ok := testprod.ConsumeVersioned(out[0]); !ok || sum != 3 {
		t.Fatalf("C read tensor 0: sum %v ok %v", sum, ok)
	}
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter calls %d after consuming tensor 0, want 1", n)
	}
	back, err := hurray.FromDLPackVersionedN(out[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got := dataAddr(t, back[0]); got != addr[1] {
		t.Fatalf("re-import at %#x, memory at %#x", got, addr[1])
	}
	for _, b := range back {
		b.Release()
	}
	if n := testprod.DeleterCalls(); n != 2 {
		t.Fatalf("deleter calls %d, want 2 (tensor 1 is still shared)", n)
	}
	keep.Release()
	if n := testprod.DeleterCalls(); n != 3 {
		t.Fatalf("deleter calls %d, want 3", n)
	}
	if got, err := hurray.ToDLPackVersionedN([]*hurray.Buffer{}); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty batch: %v %v", got, err)
	}
}

// The legacy export; a reusable Buffer (ShareInto) is exported and filled
// again.
func TestToDLPackNLegacyAndReusable(t *testing.T) {
	testprod.Reset()
	src, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{4}, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	dst := hurray.NewBuffer()
	for round := 0; round < 3; round++ {
		if err := src.ShareInto(dst); err != nil {
			t.Fatal(err)
		}
		other, err := src.ShareOne()
		if err != nil {
			t.Fatal(err)
		}
		out, err := hurray.ToDLPackN([]*hurray.Buffer{other, dst})
		if err != nil {
			t.Fatal(err)
		}
		for _, tensor := range out {
			if sum, ok := testprod.ConsumeLegacy(tensor); !ok || sum != 10 {
				t.Fatalf("C read sum %v ok %v", sum, ok)
			}
		}
		if !dst.Released() || !other.Released() {
			t.Fatal("exported Buffers still open")
		}
	}
	if n := testprod.DeleterCalls(); n != 0 {
		t.Fatalf("deleter ran %d times before the last reference", n)
	}
	src.Release()
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter calls %d, want 1", n)
	}
}

// A batch export waits for scoped views of its Buffers on other goroutines
// without holding the others: here a view's callback closes another Buffer
// of the batch while the export waits (an export that held the other locks
// while it waited could deadlock with it). The export then finds that Buffer released and
// fails naming it, changing nothing; a second export of the rest succeeds.
func TestToDLPackNWaitsForViewsWithoutHoldingTheOthers(t *testing.T) {
	testprod.Reset()
	bufs, err := hurray.FromDLPackVersionedN([]unsafe.Pointer{
		testprod.MakeVersioned([]int64{2}, 1, 0),
		testprod.MakeVersioned([]int64{2}, 1, 0),
		testprod.MakeVersioned([]int64{2}, 1, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	inView := make(chan struct{})
	exportStarted := make(chan struct{})
	viewDone := make(chan error)
	go func() {
		viewDone <- bufs[2].WithBytes(func([]byte) error {
			close(inView)
			<-exportStarted
			time.Sleep(20 * time.Millisecond) // let the export reach its wait
			return bufs[0].Close()
		})
	}()
	<-inView
	close(exportStarted)
	_, err = hurray.ToDLPackVersionedN(bufs)
	if err := <-viewDone; err != nil {
		t.Fatal(err)
	}
	wantBatch(t, err, 0, hurray.ErrClosed, "bufs[0] is released")
	if bufs[1].Released() || bufs[2].Released() {
		t.Fatal("a failed export released a Buffer")
	}
	out, err := hurray.ToDLPackVersionedN(bufs[1:])
	if err != nil {
		t.Fatal(err)
	}
	for _, tensor := range out {
		testprod.Delete(tensor)
	}
	if n := testprod.DeleterCalls(); n != 3 {
		t.Fatalf("deleter calls %d, want 3", n)
	}
}

// Goroutines export overlapping batches in opposite orders while others
// read the Buffers: exactly one export of each pair wins, no deadlock, and
// every tensor's deleter runs once.
func TestToDLPackNRacingBatches(t *testing.T) {
	testprod.Reset()
	const rounds = 200
	for r := 0; r < rounds; r++ {
		bufs, err := hurray.FromDLPackVersionedN([]unsafe.Pointer{
			testprod.MakeVersioned([]int64{2}, 0, 0),
			testprod.MakeVersioned([]int64{2}, 0, 0),
			testprod.MakeVersioned([]int64{2}, 0, 0),
		})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won [][]unsafe.Pointer
		batches := [][]*hurray.Buffer{{bufs[0], bufs[1], bufs[2]}, {bufs[2], bufs[1], bufs[0]}}
		for _, batch := range batches {
			wg.Add(2)
			go func(batch []*hurray.Buffer) {
				defer wg.Done()
				out, err := hurray.ToDLPackVersionedN(batch)
				if err == nil {
					mu.Lock()
					won = append(won, out)
					mu.Unlock()
				} else if !errors.Is(err, hurray.ErrClosed) {
					t.Error(err)
				}
			}(batch)
			go func(b *hurray.Buffer) {
				defer wg.Done()
				_ = b.WithBytes(func([]byte) error { return nil })
			}(batch[0])
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d exports won, want 1", r, len(won))
		}
		for _, tensor := range won[0] {
			testprod.Delete(tensor)
		}
	}
	if n := testprod.DeleterCalls(); n != 3*rounds {
		t.Fatalf("deleter calls %d, want %d", n, 3*rounds)
	}
}

func groupDescs() []hurray.TensorDesc {
	return []hurray.TensorDesc{
		{DType: hurray.Float32, Shape: []int64{2, 3}},
		{DType: hurray.Uint8, Shape: []int64{5}},
		{DType: hurray.Float64, Shape: []int64{0}},
		{DType: hurray.Float64, Shape: []int64{4, 4}, ReadOnly: true},
	}
}

// A group is one allocation: Buffer i is description i's tensor at the
// documented offsets (float32[2,3] at 0, uint8[5] at 256, the empty tensor
// and float64[4,4] at 512), each GroupAlignment-aligned; the one memfd is
// unmapped once, after the last Buffer, in every order of Close.
func TestAllocGroupOneAllocationFreedAfterTheLast(t *testing.T) {
	before := memfdMaps(t)
	orders := 0
	perm := []int{0, 1, 2, 3}
	var permute func(k int)
	permute = func(k int) {
		if k == len(perm) {
			orders++
			g, err := hurray.AllocGroup(groupDescs(), true)
			if err != nil {
				t.Fatal(err)
			}
			if got := memfdMaps(t); got != before+1 {
				t.Fatalf("%d memfd mappings for one group, want %d", got, before+1)
			}
			base := dataAddr(t, g[0])
			if base%hurray.GroupAlignment != 0 {
				t.Fatalf("group at %#x, not %d-aligned", base, hurray.GroupAlignment)
			}
			for i, off := range []uintptr{0, 256, 0, 512} {
				if i == 2 {
					continue // no bytes: no address to compare
				}
				if got := dataAddr(t, g[i]) - base; got != off {
					t.Fatalf("tensor %d at offset %d, want %d", i, got, off)
				}
			}
			for i, d := range groupDescs() {
				dt, _ := g[i].DType()
				shape := must(t)(g[i].Shape())
				if dt != d.DType || len(shape) != len(d.Shape) || g[i].ReadOnly() != d.ReadOnly {
					t.Fatalf("tensor %d: %v %v read-only %v", i, dt, shape, g[i].ReadOnly())
				}
			}
			for k, i := range perm {
				if err := g[i].Close(); err != nil {
					t.Fatal(err)
				}
				want := before + 1
				if k == len(perm)-1 {
					want = before
				}
				if got := memfdMaps(t); got != want {
					t.Fatalf("order %v: %d mappings after closing %d Buffers, want %d", perm, got, k+1, want)
				}
			}
			return
		}
		for i := k; i < len(perm); i++ {
			perm[k], perm[i] = perm[i], perm[k]
			permute(k + 1)
			perm[k], perm[i] = perm[i], perm[k]
		}
	}
	permute(0)
	if orders != 24 {
		t.Fatalf("%d orders, want 24", orders)
	}
}

// Members of a group are ordinary Buffers: written through a typed view,
// shared, handed to C as DLPack (the tensor's data is the member's memory)
// and released on other goroutines; the memory goes after the last of all.
func TestAllocGroupMembersShareExportAndGoroutines(t *testing.T) {
	before := memfdMaps(t)
	descs := make([]hurray.TensorDesc, 16)
	for i := range descs {
		descs[i] = hurray.TensorDesc{DType: hurray.Float32, Shape: []int64{4}}
	}
	g, err := hurray.AllocGroup(descs, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range g {
		if err := b.WithFloat32s(func(f []float32) error {
			for k := range f {
				f[k] = float32(i)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	extra, err := g[3].Share(2)
	if err != nil {
		t.Fatal(err)
	}
	addr := dataAddr(t, g[5])
	out, err := hurray.ToDLPackVersionedN(g[5:7])
	if err != nil {
		t.Fatal(err)
	}
	if testprod.FirstByte(out[0]) != addr {
		t.Fatal("the exported tensor is not the member's memory")
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(g); i += 4 {
				if i == 5 || i == 6 {
					continue
				}
				if err := g[i].Close(); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	for i, tensor := range out {
		if sum, ok := testprod.ConsumeVersioned(tensor); !ok || sum != float64(4*(5+i)) {
			t.Fatalf("C read tensor %d: sum %v ok %v", i, sum, ok)
		}
	}
	if got := memfdMaps(t); got != before+1 {
		t.Fatalf("%d mappings while 2 shares live, want %d", got, before+1)
	}
	if got := floats(t, extra[1]); got[0] != 3 {
		t.Fatalf("share of member 3 holds %v", got)
	}
	extra[0].Release()
	extra[1].Release()
	if got := memfdMaps(t); got != before {
		t.Fatalf("%d mappings after the last reference, want %d", got, before)
	}
}

// Bad descriptions fail the group naming their index, with libhurray's
// message or this package's, and nothing stays allocated.
func TestAllocGroupBadDescriptions(t *testing.T) {
	before := memfdMaps(t)
	for _, c := range []struct {
		edit   func(d []hurray.TensorDesc)
		index  int
		status hurray.Status
		msg    string
	}{
		{func(d []hurray.TensorDesc) { d[2].Shape = []int64{-3} }, 2, hurray.ErrInvalidArgument,
			"descs[2].shape[0] is -3 (must be >= 0)"},
		{func(d []hurray.TensorDesc) { d[1].DType = hurray.DType{Code: 2, Bits: 33, Lanes: 1} }, 1,
			hurray.ErrUnsupportedDType, "descs[1].dtype.bits is 33, which is not valid for dtype code 2"},
		{func(d []hurray.TensorDesc) { d[3].Shape = make([]int64, 65) }, 3, hurray.ErrInvalidArgument,
			"descs[3] has 65 extents (HURRAY_MAX_NDIM is 64)"},
		{func(d []hurray.TensorDesc) { d[0].Shape = []int64{1 << 40, 1 << 30} }, 0, hurray.ErrOverflow,
			"descs[0]: the element count of the shape exceeds 2^63-1"},
	} {
		d := groupDescs()
		c.edit(d)
		_, err := hurray.AllocGroup(d, true)
		wantBatch(t, err, c.index, c.status, c.msg)
	}
	if got := memfdMaps(t); got != before {
		t.Fatalf("%d mappings after failed groups, want %d", got, before)
	}
	if g, err := hurray.AllocGroup(nil, false); err != nil || g == nil || len(g) != 0 {
		t.Fatalf("empty group: %v %v", g, err)
	}
}

// A group member dropped without Close is released by the finaliser (the
// safety net, counted); the memory goes once the last member is gone.
func TestAllocGroupFinalizerSafetyNet(t *testing.T) {
	for i := 0; i < 3; i++ { // earlier tests' finalisers run first
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	before := memfdMaps(t)
	fin := hurray.FinalizerReleases()
	keep := func() *hurray.Buffer {
		g, err := hurray.AllocGroup(groupDescs(), true)
		if err != nil {
			t.Fatal(err)
		}
		return g[1] // the other three are dropped
	}()
	deadline := time.Now().Add(10 * time.Second)
	for hurray.FinalizerReleases()-fin < 3 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := hurray.FinalizerReleases() - fin; got != 3 {
		t.Fatalf("finaliser released %d, want 3", got)
	}
	if got := memfdMaps(t); got != before+1 {
		t.Fatalf("%d mappings while one member lives, want %d", got, before+1)
	}
	if err := keep.Close(); err != nil {
		t.Fatal(err)
	}
	if got := memfdMaps(t); got != before {
		t.Fatalf("%d mappings after the last member, want %d", got, before)
	}
}
