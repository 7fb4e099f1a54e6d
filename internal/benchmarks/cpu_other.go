//go:build !unix

package benchmarks

import "time"

// processCPU is not measured on this system: the CPU baseline reads 0.
func processCPU() time.Duration { return 0 }
