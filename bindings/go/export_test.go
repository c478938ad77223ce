// SPDX-License-Identifier: Apache-2.0

package hurray

// CgoNoop is one empty cgo call, for BenchmarkCgoNoop.
var CgoNoop = cgoNoop
