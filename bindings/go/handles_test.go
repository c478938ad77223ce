// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/freshcheck"
	"github.com/libhurray/libhurray/bindings/go/internal/nativeendian"
	"github.com/libhurray/libhurray/bindings/go/internal/testprod"
)

// childEnv names the helper test a child process (the test binary run again)
// is to run; helper tests skip unless it names them.
const childEnv = "HURRAY_GO_TEST_CHILD"

// runChild runs helper test `name` in a child process with extra env, so a
// fatal runtime error there fails this test instead of ending the suite.
func runChild(t *testing.T, name string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), childEnv+"="+name), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+name)) {
		if len(out) > 6000 {
			out = out[:6000]
		}
		t.Fatalf("child %s %v: %v\n%s", name, env, err, out)
	}
}

func childOnly(t *testing.T, name string) {
	if os.Getenv(childEnv) != name {
		t.Skip("helper test: runs in a child process of the test that needs it")
	}
}

// Handles whose pointer-sized fields hold non-pointers (user_data 0x40, the
// data 0x40 of an empty tensor, a 0-d tensor's dangling shape and strides;
// the checking mode's handle ids in user_data) go through every operation
// while stacks grow and shrink and the GC runs, with the runtime's bad
// pointer checks on. Before handles were kept in C memory this was "fatal
// error: invalid pointer found on stack".
func TestNonPointerValuesInHandles(t *testing.T) {
	t.Run("producer", func(t *testing.T) {
		runChild(t, "TestChildNonPointerValues", "GODEBUG=invalidptr=1")
	})
	t.Run("HURRAY_CHECK=1", func(t *testing.T) {
		runChild(t, "TestChildNonPointerValues", "GODEBUG=invalidptr=1", "HURRAY_CHECK=1")
	})
}

// deep runs f under n more small frames, so that over n = 0, 1, 2, ... the
// goroutine's stack must grow at every point inside f's calls in turn.
//
//go:noinline
func deep(n int, f func()) int {
	if n == 0 {
		f()
		return 0
	}
	return deep(n-1, f) + 1
}

func oddRound(kind int) error {
	b, err := hurray.FromDLPackVersioned(testprod.MakeOdd(kind))
	if err != nil {
		return err
	}
	more, err := b.Share(3)
	if err != nil {
		return err
	}
	if kind == 0 {
		runtime.GC()
	}
	// A round trip through DLPack gives the odd handle back.
	t, err := more[2].ToDLPackVersioned()
	if err != nil {
		return err
	}
	if more[2], err = hurray.FromDLPackVersioned(t); err != nil {
		return err
	}
	wantShape := map[int][]int64{0: {0, 3}, 1: {4}, 2: {}}[kind]
	wantBytes := map[int]int{0: 0, 1: 16, 2: 4}[kind]
	for _, x := range append([]*hurray.Buffer{b}, more...) {
		shape, err1 := x.Shape()
		strides, err2 := x.Strides()
		dt, err3 := x.DType()
		dev, err4 := x.Device()
		for _, err := range []error{err1, err2, err3, err4} {
			if err != nil {
				return err
			}
		}
		if shape == nil || len(shape) != len(wantShape) || len(strides) != len(wantShape) {
			return errors.New("kind " + strconv.Itoa(kind) + ": shape/strides lost")
		}
		for i := range shape {
			if shape[i] != wantShape[i] {
				return errors.New("kind " + strconv.Itoa(kind) + ": wrong shape")
			}
		}
		if dt != hurray.Float32 || dev.Type != hurray.DeviceCPU {
			return errors.New("wrong dtype or device")
		}
		raw, err := x.Bytes()
		if err != nil {
			return err
		}
		if raw == nil || len(raw) != wantBytes {
			return errors.New("kind " + strconv.Itoa(kind) + ": Bytes spans " + strconv.Itoa(len(raw)))
		}
		if kind == 1 && math.Float32frombits(nativeendian.Order.Uint32(raw[12:])) != 3 ||
			kind == 2 && math.Float32frombits(nativeendian.Order.Uint32(raw)) != 7 {
			return errors.New("kind " + strconv.Itoa(kind) + ": wrong contents")
		}
		runtime.KeepAlive(x)
	}
	b.Release()
	more[0].Release()
	more[0].Release()
	more[2].Release()
	_ = more[1] // dropped: the finaliser releases it
	return nil
}

func TestChildNonPointerValues(t *testing.T) {
	childOnly(t, "TestChildNonPointerValues")
	testprod.ResetOdd()
	before := hurray.FinalizerReleases()
	stop := make(chan struct{})
	var gc sync.WaitGroup
	gc.Add(1)
	go func() { // GC cycles shrink idle stacks while the rounds run
		defer gc.Done()
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	const depths, kinds = 1024, 3
	errs := make(chan error, depths*kinds)
	var wg sync.WaitGroup
	for d := 0; d < depths; d++ {
		for kind := 0; kind < kinds; kind++ {
			wg.Add(1)
			go func(d, kind int) {
				defer wg.Done()
				deep(d, func() {
					if err := oddRound(kind); err != nil {
						errs <- err
					}
				})
			}(d, kind)
		}
	}
	wg.Wait()
	close(stop)
	gc.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const made = depths * kinds
	deadline := time.Now().Add(20 * time.Second)
	for testprod.OddReleases() < made && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	if n := testprod.OddReleases(); n != made {
		t.Fatalf("odd handles released %d times, want %d (once each)", n, made)
	}
	if n := testprod.OddBadUserData(); n != 0 {
		t.Fatalf("%d releases got a user_data other than 0x40", n)
	}
	if n := hurray.FinalizerReleases() - before; n != made {
		t.Fatalf("the finaliser released %d dropped Buffers, want %d", n, made)
	}
}

// commitLimitBytes is how much this machine can ever commit (RAM + swap),
// or 0 when the kernel would promise any amount (overcommit_memory 1).
func commitLimitBytes(t *testing.T) uint64 {
	mode, err := os.ReadFile("/proc/sys/vm/overcommit_memory")
	if err != nil || strings.TrimSpace(string(mode)) == "1" {
		return 0
	}
	info, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb uint64
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "MemTotal:" || f[0] == "SwapTotal:") {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			kb += v
		}
	}
	return kb * 1024
}

// Share(2^32 - 1) needs 2^32 handles (80 bytes each, 320 GiB): the C
// allocation fails and Share returns ErrOutOfMemory, with the source
// unchanged. Before, Go's make died with "fatal error: runtime: out of
// memory".
func TestShareTooManyIsOutOfMemory(t *testing.T) {
	const n = 1<<32 - 1
	if limit := commitLimitBytes(t); limit == 0 || limit >= (n+1)*80 {
		t.Skipf("this machine might grant %d handles (commit limit %d bytes)", n+1, limit)
	}
	testprod.Reset()
	b, err := hurray.FromDLPackVersioned(testprod.MakeVersioned([]int64{3}, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	bufs, err := b.Share(n)
	if !errors.Is(err, hurray.ErrOutOfMemory) || bufs != nil {
		t.Fatalf("Share(2^32-1) = %d Buffers, %v; want ErrOutOfMemory", len(bufs), err)
	}
	wantStatus(t, "Share(2^32-1)", err, hurray.ErrOutOfMemory)
	if shape, err := b.Shape(); b.Released() || err != nil || len(shape) != 1 {
		t.Fatal("the failed Share changed the source")
	}
	more, err := b.Share(1)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	more[0].Release()
	if n := testprod.DeleterCalls(); n != 1 {
		t.Fatalf("deleter ran %d times", n)
	}
}

// On fresh OS threads, a Share of an imported tensor as the thread's first
// libhurray call hands out complete handles (a TLS-descriptor build once did not; the
// dlopen'ed form of this check runs from bindings/run_tests.sh through the
// interop consumer). A child process, so that no thread has called
// libhurray before.
func TestShareFirstCallOnFreshThreads(t *testing.T) {
	runChild(t, "TestChildFreshThreads")
}

func TestChildFreshThreads(t *testing.T) {
	childOnly(t, "TestChildFreshThreads")
	if err := freshcheck.Run(8, 4); err != nil {
		t.Fatal(err)
	}
}
