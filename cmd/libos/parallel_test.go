package main

import (
	"flag"
	"fmt"
	"runtime"
)

// parallelPerCPU is how many parallel tests run per CPU unless -parallel
// says otherwise: the slow end-to-end tests mostly wait on the binary they
// run (its start-up, fsyncs, builds), not on the CPU.
const parallelPerCPU = 4

// raiseParallel sets -parallel's default before TestMain runs the tests.
func raiseParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", fmt.Sprint(parallelPerCPU*runtime.GOMAXPROCS(0)))
	}
}
