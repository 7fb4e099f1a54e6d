package kernel

import (
	"encoding/json"
	"testing"
	"time"
)

// The checkpoint tools show the kernel's checkpoint records and reports
// through typed views: each view must encode to exactly the JSON the
// kernel's own value does, empty and nil fields included.
func TestCheckpointViewsKeepTheJSON(t *testing.T) {
	same := func(name string, kernel, view any) {
		t.Helper()
		a, err := json.Marshal(kernel)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(view)
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("%s:\n kernel %s\n view   %s", name, a, b)
		}
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, cp := range []Checkpoint{
		{},
		{ID: "cp-1", RootPID: 2, CreatedAt: at, PIDs: []int64{2, 3}, Objects: 4, Messages: 5,
			Marks: map[int64]checkpointMarks{2: {MailboxSeq: 7, ToolCalls: 8}, 3: {}}},
	} {
		same("checkpoint "+cp.ID, cp, cp.view())
	}
	for _, rep := range []RestoreReport{
		{},
		{Checkpoint: "cp-1", Restored: []int64{}, Killed: []int64{4}, KeptTerminal: []int64{5}, NotRestored: []string{"o"},
			SupersededMessages: 2, EffectsSince: []EffectSinceRef{}},
		{Checkpoint: "cp-2", EffectsSince: []EffectSinceRef{{PID: 2, Tool: "echo", CallID: "c1", OK: true}}},
	} {
		same("restore "+rep.Checkpoint, rep, rep.view())
	}
	for _, rep := range []ForkReport{{}, {Checkpoint: "cp-1", RootPID: 9, PIDs: map[int64]int64{2: 9, 3: 10}}} {
		same("fork "+rep.Checkpoint, rep, rep.view())
	}
}
