package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
)

// approvalsCommand lists the calls waiting for a Human's decision.
func approvalsCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("approvals", stderr)
	pos, err := parseInterspersed(f.fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 0 {
		return usageError(stderr, f.fs.Name(), "want no argument, got %s", countArgs(len(pos)))
	}
	return controlCommand(*f.dir, control.Request{Op: "approvals"}, *f.asJSON, stdout, stderr, "approvals", func(b json.RawMessage) string {
		var list []kernel.Approval
		json.Unmarshal(b, &list)
		if len(list) == 0 {
			return "no calls wait for approval"
		}
		var sb strings.Builder
		tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tCALL\tID\tTOOL\tNEEDS\tREQUESTED\tARGUMENTS")
		for _, a := range list {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s on %s\t%s\t%s\n", a.PID, a.CallID, a.ID, a.Tool, strings.Join(a.Rights, ","), a.Resource,
				a.RequestedAt.UTC().Format(time.RFC3339), shorten(string(a.Arguments), 60))
		}
		tw.Flush()
		return strings.TrimRight(sb.String(), "\n")
	})
}

// decideCommand approves or denies one held call: libos approve|deny <pid> <call_id> [--id ID].
func decideCommand(op string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		f := newReadFlags(op, stderr)
		id := f.fs.String("id", "", "the hold's ID from libos approvals: decide that hold only, not a later call the model made under the same call id")
		var reason *string
		if op == "deny" {
			reason = f.fs.String("reason", "", "why the call is denied (the process sees it)")
		}
		pos, err := parseInterspersed(f.fs, args)
		if err != nil {
			return exitUsage
		}
		if len(pos) != 2 {
			return usageError(stderr, f.fs.Name(), "want <pid> <call_id>, got %s", countArgs(len(pos)))
		}
		pid, err := parsePID(pos[0])
		if err != nil {
			return usageError(stderr, f.fs.Name(), "%v", err)
		}
		req := control.Request{Op: op, PID: pid, CallID: pos[1], ApprovalID: *id}
		if reason != nil {
			req.Reason = *reason
		}
		return controlCommand(*f.dir, req, *f.asJSON, stdout, stderr, op, func(json.RawMessage) string {
			if op == "approve" {
				return fmt.Sprintf("pid %d: call %s approved; it runs in the process's next quantum", pid, pos[1])
			}
			return fmt.Sprintf("pid %d: call %s denied", pid, pos[1])
		})
	}
}
