package quantum

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/libos/libos/internal/datadriven"
)

// TestScripts drives batches through testdata/*.txt:
//
//	batch turn=N calls=a,b,c [truncated]   a new batch
//	continue | crashed                     inputs without data
//	seen [msgs=normal:5,interrupt:6]       the messages a check found (kind:seq)
//	invoked done|refused|held|effect|blocked|exited [ends]
//	effect-done [killed]
//	reload                                 store and load the batch (as a record does)
//	start [runnable] [resume] [approval] [resumed] [continuing] [interrupted] [context-object] [server-refused]
//	                                       how a quantum of such a process begins
//	share waiting=N free=N [stopping]      whether a process keeps its worker for its next call
//
// Each input prints the effects and the phase after them.
func TestScripts(t *testing.T) {
	var b *Batch
	datadriven.Run(t, "testdata/*.txt", func(t *testing.T, c *datadriven.Case) string {
		var in Input
		switch c.Cmd {
		case "batch":
			turn, _ := c.Arg("turn")
			n, err := strconv.Atoi(turn)
			if err != nil {
				t.Fatalf("%s: turn: %v", c.Pos, err)
			}
			var calls []Call
			if names, _ := c.Arg("calls"); names != "" {
				for i, name := range strings.Split(names, ",") {
					calls = append(calls, Call{ID: fmt.Sprintf("c%d", i), Name: name, Arguments: json.RawMessage("{}")})
				}
			}
			_, truncated := c.Arg("truncated")
			b = NewBatch(n, calls, truncated)
			return "phase " + b.Phase().String()
		case "reload":
			data, err := json.Marshal(b)
			if err != nil {
				t.Fatalf("%s: %v", c.Pos, err)
			}
			b = new(Batch)
			if err := json.Unmarshal(data, b); err != nil {
				t.Fatalf("%s: %v", c.Pos, err)
			}
			return string(data) + "\nphase " + b.Phase().String()
		case "start":
			words := map[string]bool{}
			for _, w := range c.Words() {
				words[w] = true
			}
			b := Begin{Runnable: words["runnable"], ResumePending: words["resume"], PendingApproval: words["approval"],
				Resumed: words["resumed"], Continuing: words["continuing"], InterruptedTurn: words["interrupted"],
				ContextObject: words["context-object"], ServerRefused: words["server-refused"]}
			out := b.Open().String()
			switch b.Open() {
			case CallProvider:
				out += fmt.Sprintf("\n%+v", b.Prelude())
			case Resume:
				out += fmt.Sprintf("\nends=%t", b.ResumeEnds())
			}
			return out
		case "share":
			num := func(name string) int {
				v, _ := c.Arg(name)
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s: %s: %v", c.Pos, name, err)
				}
				return n
			}
			_, stopping := c.Arg("stopping")
			s := Share{Waiting: num("waiting"), FreeWorkers: num("free"), Stopping: stopping}
			return fmt.Sprintf("keeps-worker=%t", s.KeepsWorker())
		case "continue":
			in = Input{Kind: Continue}
		case "crashed":
			in = Input{Kind: Crashed}
		case "stopped":
			in = Input{Kind: Stopped}
		case "seen":
			in = Input{Kind: Seen}
			if list, _ := c.Arg("msgs"); list != "" {
				for _, m := range strings.Split(list, ",") {
					kind, seq, _ := strings.Cut(m, ":")
					n, _ := strconv.ParseUint(seq, 10, 64)
					in.Notices = append(in.Notices, Notice{ID: "m" + seq, Seq: n, Kind: kind})
				}
			}
		case "invoked":
			in = Input{Kind: Invoked}
			kinds := map[string]OutcomeKind{"done": Done, "refused": Refused, "held": Held, "effect": OutsideEffect, "blocked": Blocked, "exited": Exited}
			for _, w := range c.Words() {
				if k, ok := kinds[w]; ok {
					in.Outcome.Kind = k
				}
				if w == "ends" {
					in.Outcome.EndsBatch = true
				}
			}
			in.Outcome.Payload = "payload"
		case "effect-done":
			_, killed := c.Arg("killed")
			in = Input{Kind: EffectDone, Running: !killed}
		default:
			t.Fatalf("%s: unknown command %q", c.Pos, c.Cmd)
		}
		effects, err := b.Step(in)
		if err != nil {
			return "error: " + err.Error()
		}
		return render(b, effects)
	})
}

func render(b *Batch, effects []Effect) string {
	var out strings.Builder
	for _, e := range effects {
		fmt.Fprintf(&out, "%s", e.Kind)
		if e.Kind != End && e.Kind != Abandon {
			fmt.Fprintf(&out, " %s", b.Calls[e.Call].Name)
		}
		if e.Before {
			out.WriteString(" before")
		}
		if e.Reason != "" {
			fmt.Fprintf(&out, ": %s", e.Reason)
		}
		if end := e.Ending; end != nil {
			fmt.Fprintf(&out, " %s", end.Kind)
			if end.Kind == Wait || end.Kind == Exit {
				fmt.Fprintf(&out, " on %s", b.Calls[end.Call].Name)
			}
			for _, n := range end.Notices {
				fmt.Fprintf(&out, " notice=%s", n.ID)
			}
			if end.RewindNotified {
				fmt.Fprintf(&out, " rewind-notified-to=%d", end.NotifiedSeq)
			}
			if end.TruncatedNotice {
				out.WriteString(" truncated-notice")
			}
		}
		out.WriteString("\n")
	}
	fmt.Fprintf(&out, "phase %s", b.Phase())
	if b.EndedBy != "" {
		fmt.Fprintf(&out, ", ended by %s", b.EndedBy)
	}
	return out.String()
}
