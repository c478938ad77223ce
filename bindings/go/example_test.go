// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	hurray "github.com/libhurray/libhurray/bindings/go"
)

// Allocate CPU memory, fill it, share it with two workers that release on
// their own goroutines, and release the owner's reference too: the memory is
// freed once, by whichever release comes last.
func Example() {
	buf, err := hurray.Alloc(hurray.Uint8, []int64{2, 4}, false)
	if err != nil {
		panic(err)
	}
	raw, _ := buf.Bytes()
	for i := range raw {
		raw[i] = byte(i)
	}
	runtime.KeepAlive(buf)

	workers, err := buf.Share(2)
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	sums := make([]int, len(workers))
	for i, w := range workers {
		wg.Add(1)
		go func(i int, w *hurray.Buffer) {
			defer wg.Done()
			defer w.Release()
			data, _ := w.Bytes()
			for _, v := range data {
				sums[i] += int(v)
			}
		}(i, w)
	}
	buf.Release()
	wg.Wait()
	_, err = workers[0].Shape()
	fmt.Println(buf.Released(), errors.Is(err, hurray.ErrClosed), sums)
	// Output: true true [28 28]
}
