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

// A quantized weight as one group: 4-bit data packed two to a byte and one
// scale per block of 32 values, each its own Buffer, in one allocation that
// is freed after the last of them.
func ExampleAllocGroup() {
	group, err := hurray.AllocGroup([]hurray.TensorDesc{
		{DType: hurray.Uint8, Shape: []int64{64, 16}},                // 64 x 32 values, packed
		{DType: hurray.Uint8, Shape: []int64{64, 1}, ReadOnly: true}, // the block scales
	}, false)
	if err != nil {
		panic(err)
	}
	data, scales := group[0], group[1]
	defer data.Close()
	defer scales.Close()
	shape, _ := scales.Shape()
	fmt.Println(len(group), shape, scales.ReadOnly(), hurray.GroupAlignment)
	// Output: 2 [64 1] true 256
}

// Hand several Buffers on as DLPack tensors in one call, and take them back
// in one call: all or nothing, and a failure names the element at fault.
func ExampleToDLPackVersionedN() {
	a, _ := hurray.Alloc(hurray.Float32, []int64{2}, false)
	b, _ := hurray.Alloc(hurray.Int64, []int64{3}, false)
	tensors, err := hurray.ToDLPackVersionedN([]*hurray.Buffer{a, b})
	if err != nil {
		panic(err)
	}
	fmt.Println(a.Released(), b.Released(), len(tensors))

	// The tensors are C DLManagedTensorVersioned pointers for another
	// runtime; here they come back (a nil element would fail the whole
	// batch with a *hurray.BatchError naming its index).
	bufs, err := hurray.FromDLPackVersionedN(tensors)
	if err != nil {
		panic(err)
	}
	for _, buf := range bufs {
		defer buf.Close()
	}
	_, err = hurray.ToDLPackVersionedN([]*hurray.Buffer{bufs[0], bufs[0]})
	var be *hurray.BatchError
	fmt.Println(errors.As(err, &be), be.Index, errors.Is(err, hurray.ErrInvalidArgument))
	// Output:
	// true true 2
	// true 1 true
}
