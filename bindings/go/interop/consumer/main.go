// SPDX-License-Identifier: Apache-2.0

// Command consumer is the Go side of the interop test, built with
// -buildmode=c-shared and loaded into the JVM of the Java tests
// (bindings/java InteropTest): it takes a C DLPack tensor through the hurray
// package, shares it and releases the shares on their own goroutines. A C
// host that loads it with dlopen (interop/dlopenhost) also runs the
// fresh-thread check through it (HurrayGoFreshThreads), so libhurray is
// loaded the way a JVM or Python process loads a Go library.
package main

// #include "note.h"
import "C"

import (
	"math"
	"math/rand"
	"runtime"
	"sync"
	"time"
	"unsafe"

	hurray "github.com/libhurray/libhurray/bindings/go"
	"github.com/libhurray/libhurray/bindings/go/internal/freshcheck"
	"github.com/libhurray/libhurray/bindings/go/internal/nativeendian"
)

var pending sync.WaitGroup

// HurrayGoConsume imports tensor (a DLManagedTensorVersioned*), sums its
// float32 elements into *sum, shares it into n Buffers and releases each on
// its own goroutine (calling note right before each release); it returns
// without waiting for them. 0 on success, else the hurray status.
//
//export HurrayGoConsume
func HurrayGoConsume(tensor unsafe.Pointer, n C.int, note C.hgo_note_fn, sum *C.double) C.int {
	b, err := hurray.FromDLPackVersioned(tensor)
	if err != nil {
		return C.int(err.(*hurray.Error).Status)
	}
	raw, err := b.Bytes()
	if err != nil {
		b.Release()
		return C.int(err.(*hurray.Error).Status)
	}
	s := 0.0
	for i := 0; i+4 <= len(raw); i += 4 {
		s += float64(math.Float32frombits(nativeendian.Order.Uint32(raw[i:])))
	}
	runtime.KeepAlive(b)
	*sum = C.double(s)
	all := []*hurray.Buffer{b}
	if n > 1 {
		more, err := b.Share(int(n) - 1)
		if err != nil {
			b.Release()
			return C.int(err.(*hurray.Error).Status)
		}
		all = append(all, more...)
	}
	for _, x := range all {
		pending.Add(1)
		go func(x *hurray.Buffer) {
			defer pending.Done()
			time.Sleep(time.Duration(rand.Intn(200)) * time.Microsecond)
			C.hgo_call_note(note)
			x.Release()
		}(x)
	}
	return 0
}

// HurrayGoWait blocks until every goroutine HurrayGoConsume started has
// released.
//
//export HurrayGoWait
func HurrayGoWait() { pending.Wait() }

// HurrayGoFreshThreads runs freshcheck.Run(threads, shares): on fresh OS
// threads, a Share of an imported tensor as the first libhurray call, every
// field of every handle checked. It returns 0, or 1 with the first mismatch
// in msg (NUL-terminated, at most cap bytes). Call it once per process,
// before anything else in the process uses libhurray on other threads.
//
//export HurrayGoFreshThreads
func HurrayGoFreshThreads(threads, shares C.int, msg *C.char, cap C.size_t) C.int {
	err := freshcheck.Run(int(threads), int(shares))
	if err == nil {
		return 0
	}
	if cap > 0 {
		out := unsafe.Slice((*byte)(unsafe.Pointer(msg)), int(cap))
		n := copy(out[:cap-1], err.Error())
		out[n] = 0
	}
	return 1
}

func main() {}
