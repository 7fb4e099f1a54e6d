package benchmarks

import "flag"

// full runs the benchmarks at the goals' full sizes (go test -bench ...
// -args -full).
var full = flag.Bool("full", false, "benchmark at the goals' full sizes (50,000 ended processes, 100,000 processes reopened)")
