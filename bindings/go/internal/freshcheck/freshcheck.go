// SPDX-License-Identifier: Apache-2.0

// Package freshcheck checks the handles that a Share hands out when it is
// the first libhurray call on a fresh OS thread. A libhurray built with TLS
// descriptors and loaded with dlopen (as a Go c-shared library loaded by a
// JVM or a Python process loads it) returned NULL shapes and strides there
// and cleared the source (any way of loading, any thread first: c-ffi §8). The package's tests run it in a child
// process linked as usual; the interop consumer exports it to a C host that
// loads the consumer with dlopen (bindings/run_tests.sh). Test code only.
package freshcheck

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/nativeendian"
	"github.com/libhurray/libhurray/bindings/go/internal/testprod"
)

// Run imports `threads` float32 [2, 3] READ_ONLY tensors on a goroutine of
// its own, then on each of `threads` goroutines locked to OS threads makes
// Share(shares) of one of them the thread's first libhurray call, checks
// every field of the source and of every share (shape, strides, dtype,
// device, flags, data pointer, contents), hands one share to C as a DLPack
// tensor that C checks, sums and deletes, and releases the rest on that
// thread. Each producer deleter must run once. Every goroutine here that
// calls libhurray exits while locked, so the runtime destroys its thread and
// no thread runs a libhurray call twice after a first one elsewhere: the
// threads are fresh as long as nothing else in the process calls libhurray
// (no other test, no pending finaliser). It returns the first mismatch or
// nil. It waits for all goroutines; it may be called once per process.
func Run(threads, shares int) error {
	if threads < 1 || shares < 1 {
		return fmt.Errorf("freshcheck.Run(%d, %d): need at least one thread and one share", threads, shares)
	}
	testprod.Reset()
	type source struct {
		buf   *hurray.Buffer
		data  uintptr
		start float32
	}
	srcs := make([]source, threads)
	errs := make([]error, threads+1)
	imported := make(chan struct{})
	go func() {
		runtime.LockOSThread() // exits locked: this thread is never reused
		defer close(imported)
		for k := range srcs {
			start := float32(10 * (k + 1))
			t := testprod.MakeVersioned([]int64{2, 3}, start, 1 /* READ_ONLY */)
			if t == nil {
				errs[threads] = fmt.Errorf("the test producer made no tensor")
				return
			}
			data := testprod.Data(t)
			b, err := hurray.FromDLPackVersioned(t)
			if err != nil {
				errs[threads] = fmt.Errorf("import: %v", err)
				return
			}
			srcs[k] = source{buf: b, data: data, start: start}
		}
	}()
	<-imported
	if errs[threads] != nil {
		for _, s := range srcs {
			if s.buf != nil {
				go func(b *hurray.Buffer) { runtime.LockOSThread(); b.Release() }(s.buf)
			}
		}
		return errs[threads]
	}

	var done, checked sync.WaitGroup
	release := make(chan struct{})
	for k := range srcs {
		done.Add(1)
		checked.Add(1)
		go func(k int) {
			runtime.LockOSThread() // first: no libhurray call ran on this goroutine's thread
			defer done.Done()
			s := srcs[k]
			more, err := s.buf.Share(shares) // the thread's first libhurray call
			errs[k] = func() error {
				if err != nil {
					return fmt.Errorf("Share(%d): %v", shares, err)
				}
				if len(more) != shares {
					return fmt.Errorf("Share(%d) gave %d Buffers", shares, len(more))
				}
				all := append([]*hurray.Buffer{s.buf}, more...)
				for j, b := range all {
					if err := checkBuffer(b, s.data, s.start); err != nil {
						return fmt.Errorf("buffer %d of %d (0: the source): %v", j, len(all), err)
					}
				}
				t, err := more[0].ToDLPackVersioned()
				if err != nil {
					return fmt.Errorf("ToDLPackVersioned: %v", err)
				}
				sum, ok := testprod.ConsumeVersioned(t)
				if want := 6*float64(s.start) + 15; !ok || sum != want {
					return fmt.Errorf("the exported tensor: C read ok=%v sum %v, want %v", ok, sum, want)
				}
				return nil
			}()
			for _, b := range more {
				b.Release()
			}
			s.buf.Release()
			checked.Done()
			<-release // hold this thread until all are checked: distinct threads
		}(k)
	}
	checked.Wait()
	close(release)
	done.Wait()
	for k, err := range errs[:threads] {
		if err != nil {
			return fmt.Errorf("fresh thread %d: %v", k, err)
		}
	}
	if n := testprod.DeleterCalls(); n != int64(threads) {
		return fmt.Errorf("the producer's deleters ran %d times for %d tensors", n, threads)
	}
	return nil
}

// checkBuffer compares every field of b with the tensor testprod made.
func checkBuffer(b *hurray.Buffer, data uintptr, start float32) error {
	if got, err := b.Shape(); err != nil || len(got) != 2 || got[0] != 2 || got[1] != 3 {
		return fmt.Errorf("shape %v, want [2 3]", got)
	}
	if got, err := b.Strides(); err != nil || len(got) != 2 || got[0] != 3 || got[1] != 1 {
		return fmt.Errorf("strides %v, want [3 1]", got)
	}
	if got, err := b.DType(); err != nil || got != hurray.Float32 {
		return fmt.Errorf("dtype %+v, want float32", got)
	}
	if got, err := b.Device(); err != nil || got != (hurray.Device{Type: hurray.DeviceCPU, ID: 0}) {
		return fmt.Errorf("device %+v, want CPU 0", got)
	}
	if !b.ReadOnly() {
		return fmt.Errorf("the READ_ONLY flag is lost")
	}
	raw, err := b.Bytes()
	if err != nil {
		return fmt.Errorf("Bytes: %v", err)
	}
	defer runtime.KeepAlive(b)
	if len(raw) != 24 {
		return fmt.Errorf("Bytes spans %d bytes, want 24", len(raw))
	}
	if got := uintptr(unsafe.Pointer(&raw[0])); got != data {
		return fmt.Errorf("data pointer %#x, want the producer's %#x", got, data)
	}
	for i := 0; i < 6; i++ {
		if v := math.Float32frombits(nativeendian.Order.Uint32(raw[4*i:])); v != start+float32(i) {
			return fmt.Errorf("element %d is %v, want %v", i, v, start+float32(i))
		}
	}
	return nil
}
