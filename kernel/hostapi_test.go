package kernel

import (
	"encoding/json"
	"reflect"
	"testing"
)

// InspectWithArguments answers what Inspect answers, whichever arguments
// the Host already knows.
func TestInspectWithArgumentsIsInspect(t *testing.T) {
	h := newHarness(t, approvalScript)
	pid := h.spawn(askSpawn())
	h.run()
	a := waitingApproval(t, h, pid)
	if err := h.rt.Approve(pid, a.CallID); err != nil {
		t.Fatal(err)
	}
	h.run()
	want, err := h.rt.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.RecentCalls) < 2 {
		t.Fatalf("recent calls %+v", want.RecentCalls)
	}
	all := map[CallKey]json.RawMessage{}
	for _, c := range want.RecentCalls {
		all[CallKey{c.Turn, c.CallID}] = c.Arguments
	}
	for name, known := range map[string]func(CallKey) (json.RawMessage, bool){
		"none": func(CallKey) (json.RawMessage, bool) { return nil, false },
		"all":  func(k CallKey) (json.RawMessage, bool) { a, ok := all[k]; return a, ok },
		"one": func(k CallKey) (json.RawMessage, bool) {
			if k.CallID != want.RecentCalls[0].CallID {
				return nil, false
			}
			return all[k], true
		},
	} {
		got, err := h.rt.InspectWithArguments(pid, known)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s known: %+v %v\nwant %+v", name, got, err, want)
		}
	}
	if _, err := h.rt.InspectWithArguments(99, nil); err == nil {
		t.Fatal("no error for a missing pid")
	}
}
