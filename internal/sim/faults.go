package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// schedule is a run's fault plan, drawn from the seed before the run starts.
type schedule struct {
	// crashEvents are event counts at whose commit the runtime crashes.
	crashEvents []int
	// crashCalls are provider call counts during which it crashes.
	crashCalls []int
	// crashAtEffect is the effect count at whose start it crashes (0: none).
	crashAtEffect int
	// unsyncedPercent is how much unsynced data a crash clone keeps.
	unsyncedPercent int
	// faultAt is the event count after which the disk fails (0: never).
	faultAt   int
	faultKind string
	// providerFault is the probability that a provider call fails.
	providerFault float64
}

// Disk fault kinds.
const (
	faultENOSPC    = "enospc-write"
	faultEIOWrite  = "eio-write"
	faultEIOSync   = "eio-sync"
	faultsDisabled = ""
)

func newSchedule(rng *rand.Rand) schedule {
	var s schedule
	for n := rng.IntN(4); n > 0; n-- {
		if rng.IntN(3) == 0 {
			s.crashCalls = append(s.crashCalls, 1+rng.IntN(40))
		} else {
			s.crashEvents = append(s.crashEvents, 1+rng.IntN(300))
		}
	}
	slices.Sort(s.crashEvents)
	slices.Sort(s.crashCalls)
	if rng.IntN(4) == 0 {
		s.crashAtEffect = 1 + rng.IntN(3)
	}
	if rng.IntN(5) == 0 {
		s.unsyncedPercent = 1 + rng.IntN(100)
	}
	if rng.IntN(5) == 0 {
		s.faultAt = 1 + rng.IntN(250)
		s.faultKind = []string{faultENOSPC, faultEIOWrite, faultEIOSync}[rng.IntN(3)]
	}
	if rng.IntN(3) == 0 {
		s.providerFault = 0.02 + rng.Float64()*0.05
	}
	return s
}

func (s schedule) crashAtEvent(n int) bool { return slices.Contains(s.crashEvents, n) }
func (s schedule) crashAtCall(n int) bool  { return slices.Contains(s.crashCalls, n) }

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "crash@events=%v crash@calls=%v crash@effect=%d unsynced=%d%%", s.crashEvents, s.crashCalls, s.crashAtEffect, s.unsyncedPercent)
	if s.faultAt > 0 {
		fmt.Fprintf(&b, " disk=%s@%d", s.faultKind, s.faultAt)
	}
	fmt.Fprintf(&b, " provider-faults=%.3f", s.providerFault)
	return b.String()
}

// diskFault injects one kind of error into write-ahead-log operations once
// armed, and remembers that it fired.
type diskFault struct {
	mu   sync.Mutex
	kind string
	hit  bool
}

var _ errorfs.Injector = (*diskFault)(nil)

func (d *diskFault) arm(kind string) {
	d.mu.Lock()
	d.kind = kind
	d.mu.Unlock()
}

func (d *diskFault) disarm() {
	d.mu.Lock()
	d.kind, d.hit = faultsDisabled, false
	d.mu.Unlock()
}

func (d *diskFault) fired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hit
}

// String implements errorfs.Injector.
func (d *diskFault) String() string { return "sim disk fault" }

// MaybeError implements errorfs.Injector.
func (d *diskFault) MaybeError(op errorfs.Op) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.kind == faultsDisabled || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	var err error
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		switch d.kind {
		case faultENOSPC:
			err = fmt.Errorf("%w: %w", errorfs.ErrInjected, syscall.ENOSPC)
		case faultEIOWrite:
			err = fmt.Errorf("%w: %w", errorfs.ErrInjected, syscall.EIO)
		}
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if d.kind == faultEIOSync {
			err = fmt.Errorf("%w: %w", errorfs.ErrInjected, syscall.EIO)
		}
	}
	if err != nil {
		d.hit = true
	}
	return err
}

// faultedRecycling sends the logs Pebble recycles through the faults:
// errorfs's ReuseForWrite hands back the underlying file, so once Pebble
// recycled its first log no log fault fired. Reuse is what Pebble's
// contract says it is, a rename and an open for writing, both through
// errorfs.
type faultedRecycling struct{ vfs.FS }

func (fs faultedRecycling) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return fs.OpenReadWrite(newname, category)
}
