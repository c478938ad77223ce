package hurray

// CgoNoop is one empty cgo call, for BenchmarkCgoNoop.
var CgoNoop = cgoNoop
