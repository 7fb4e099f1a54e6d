package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/process"
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
			// The call id, the tool and the arguments are the model's.
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s on %s\t%s\t%s\n", a.PID, termText(a.CallID), termText(a.ID), termText(a.Tool),
				termText(strings.Join(a.Rights, ",")), termText(a.Resource), a.RequestedAt.UTC().Format(time.RFC3339), termText(shorten(string(a.Arguments), 60)))
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
			// Refused here in the flag's words; the kernel refuses it too.
			if n := utf8.RuneCountInString(*reason); n > kernel.MaxDenyReasonChars {
				return usageError(stderr, f.fs.Name(), "--reason: must be at most %d characters, got %d", kernel.MaxDenyReasonChars, n)
			}
			req.Reason = *reason
		}
		c, err := connect(*f.dir, false)
		if err != nil {
			return printControl(control.Response{}, err, *f.asJSON, stdout, stderr, op, nil)
		}
		defer c.Close()
		resp, err := c.do(req)
		return printControl(resp, err, *f.asJSON, stdout, stderr, op, func(json.RawMessage) string {
			call := termText(pos[1])
			if op == "approve" {
				return fmt.Sprintf("pid %d: call %s approved; %s", pid, call, whenItRuns(c, pid))
			}
			return fmt.Sprintf("pid %d: call %s denied", pid, call)
		})
	}
}

// whenItRuns says when an approved call of pid runs: a paused process runs
// it once continued, and an idle directory once a runtime runs it, not in a
// next quantum that nothing schedules.
func whenItRuns(c *runtimeConn, pid int64) string {
	paused := false
	if resp, err := c.do(control.Request{Op: "inspect", PID: pid}); err == nil && resp.Error == "" {
		var d kernel.ProcessDetail
		if json.Unmarshal(resp.Result, &d) == nil {
			paused = d.Status == process.Paused
		}
	}
	dir := shellQuote(c.dir)
	// A directory a run made resumes; one serve made is served again.
	runtime := fmt.Sprintf("a runtime runs the directory (libos resume --dir %s, or libos serve --dir %s)", dir, dir)
	switch {
	case paused && !c.live():
		return fmt.Sprintf("it runs once the process is continued (libos continue %d --dir %s) and %s", pid, dir, runtime)
	case paused:
		return fmt.Sprintf("it runs once the process is continued (libos continue %d --dir %s)", pid, dir)
	case !c.live():
		return "it runs when " + runtime
	}
	return "it runs in the process's next quantum"
}
