package kernel

import (
	"errors"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/tools"
)

// A tool may check only the operations the authority table lists for it: any
// other check is refused before anything is decided, whatever the grants.
func TestToolChecksOnlyItsDeclaredOperations(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(append(clockGrants(), spawnGrant()))
	err := h.rt.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		builtin := h.rt.newSyscalls(tx, r, nil, &tools.Tool{Name: "get_current_time"}, "c1")
		if err := builtin.Require(authority.ClockNow, authority.Params{}); err != nil {
			t.Errorf("get_current_time checking clock.now: %v", err)
		}
		if err := builtin.Require(authority.ProcessSpawn, authority.Params{Image: "base:v0"}); !errors.Is(err, authority.ErrUndeclared) {
			t.Errorf("get_current_time checking process.spawn (granted): %v", err)
		}
		runner := h.rt.newSyscalls(tx, r, nil, &tools.Tool{Name: "skill.runner", Ops: authority.RunnerOps}, "c2")
		if err := runner.Require(authority.ClockNow, authority.Params{}); !errors.Is(err, authority.ErrUndeclared) {
			t.Errorf("a runner tool checking clock.now: %v", err)
		}
		unknown := h.rt.newSyscalls(tx, r, nil, &tools.Tool{Name: "not_in_the_table"}, "c3")
		if err := unknown.Require(authority.ClockNow, authority.Params{}); !errors.Is(err, authority.ErrUndeclared) {
			t.Errorf("a tool without an entry checking clock.now: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
