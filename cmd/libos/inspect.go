package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
)

// readFlags are the flags of a command that reads a runtime directory.
type readFlags struct {
	fs     *flag.FlagSet
	dir    *string
	asJSON *bool
}

func newReadFlags(name string, stderr io.Writer) *readFlags {
	fs := flag.NewFlagSet("libos "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &readFlags{fs: fs, dir: dirFlag(fs), asJSON: fs.Bool("json", false, "print JSON")}
}

// pid parses the flags and the one <pid> argument.
func (f *readFlags) pid(args []string, stderr io.Writer) (int64, bool) {
	arg, ok := f.one(args, "<pid>", stderr)
	if !ok {
		return 0, false
	}
	pid, err := parsePID(arg)
	if err != nil {
		usageError(stderr, f.fs.Name(), "%v", err)
		return 0, false
	}
	return pid, true
}

// one parses the flags and exactly one positional argument, named want.
func (f *readFlags) one(args []string, want string, stderr io.Writer) (string, bool) {
	pos, err := parseInterspersed(f.fs, args)
	if err != nil {
		return "", false
	}
	if len(pos) != 1 {
		usageError(stderr, f.fs.Name(), "want %s, got %s", want, countArgs(len(pos)))
		return "", false
	}
	return pos[0], true
}

func countArgs(n int) string {
	if n == 1 {
		return "1 argument"
	}
	return fmt.Sprintf("%d arguments", n)
}

// shorten cuts s to at most n runes for a one-line view.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// oneLine folds a text's lines into one.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// age is a duration as ps shows it: its largest unit.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func inspectCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("inspect", stderr)
	pid, ok := f.pid(args, stderr)
	if !ok {
		return exitUsage
	}
	return controlCommand(*f.dir, control.Request{Op: "inspect", PID: pid}, *f.asJSON, stdout, stderr, "inspect",
		func(b json.RawMessage) string {
			var d kernel.ProcessDetail
			json.Unmarshal(b, &d)
			return inspectText(d)
		})
}

func inspectText(d kernel.ProcessDetail) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	// Values are escaped here: a model names its children's images, and
	// writes reasons, arguments and results.
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, termText(v)) }
	line("pid", strconv.FormatInt(d.PID, 10))
	parent := "-"
	if d.ParentPID != nil {
		parent = strconv.FormatInt(*d.ParentPID, 10)
	}
	line("parent", parent)
	line("image", d.Image)
	status := string(d.Status)
	if d.PauseRequested {
		status += " (pauses when its quantum ends)"
	}
	if d.HostHold {
		status += " (by the Host: only libos continue lets it go on)"
	}
	line("status", status)
	if d.Reason != "" {
		line("reason", oneLine(d.Reason))
	}
	line("turn", strconv.Itoa(d.Turn))
	line("created", fmt.Sprintf("%s (%s ago)", timestamp(d.CreatedAt), age(time.Since(d.CreatedAt))))
	line("waiting on", waitText(d.WaitingOn))
	line("goal", fmt.Sprintf("%s version %d", d.Goal.OID, d.Goal.Version))
	c := d.Context
	ctx := fmt.Sprintf("%s version %d, generation %d, ~%d tokens in %d entries", c.OID, c.Version, c.Generation, c.EstimatedTokens, c.Entries)
	if c.Rebuilt {
		ctx += " (rebuilt from retained evidence)"
	}
	line("context", ctx)
	kids := "-"
	if len(d.Children) > 0 {
		ks := make([]string, len(d.Children))
		for i, k := range d.Children {
			ks[i] = strconv.FormatInt(k, 10)
		}
		kids = strings.Join(ks, ", ")
	}
	line("children", kids)
	result := "-"
	switch {
	case d.ResultOID == "":
	case d.ResultError != "":
		result = d.ResultOID + ": " + d.ResultError
	default:
		result = d.ResultOID + ": " + shorten(string(d.Result), 200)
	}
	line("result", result)
	tw.Flush()

	b.WriteString("\ngrants:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tRESOURCE\tRIGHTS\tEFFECT\tUSES LEFT\tEXPIRES\tDELEGABLE")
	for _, g := range d.Grants {
		rights := make([]string, len(g.Rights))
		for i, r := range g.Rights {
			rights[i] = string(r)
		}
		uses, expires := "-", "-"
		if g.UsesRemaining != nil {
			uses = strconv.Itoa(*g.UsesRemaining)
		}
		if g.ExpiresAt != nil {
			expires = timestamp(*g.ExpiresAt)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%t\n", termText(g.ID), termText(g.Resource), termText(strings.Join(rights, ",")), g.Effect, uses, expires, g.Delegable)
	}
	tw.Flush()

	b.WriteString("\nbudgets:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  BUDGET\tUSED\tLIMIT")
	names := make([]string, 0, len(d.Budgets))
	for n := range d.Budgets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		limit := "unlimited"
		if l := d.Budgets[n].Limit; l != 0 {
			limit = strconv.FormatInt(l, 10)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", n, d.Budgets[n].Used, limit)
	}
	tw.Flush()

	fmt.Fprintf(&b, "\nrecent calls (last %d):\n", kernel.RecentCalls)
	if len(d.RecentCalls) == 0 {
		b.WriteString("  none\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TURN\tCALL ID\tTOOL\tOUTCOME\tAUTHORITY\tARGUMENTS")
		for _, c := range d.RecentCalls {
			outcome := "ok"
			if !c.OK {
				outcome = "error " + c.ErrorCode
			}
			auth := "-"
			if len(c.Authority) > 0 {
				auth = shorten(oneLine(strings.Join(c.Authority, "; ")), 60)
			}
			args := "-"
			if len(c.Arguments) > 0 {
				args = shorten(string(c.Arguments), 80)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", c.Turn, termText(c.CallID), termText(c.Name), termText(outcome), termText(auth), termText(args))
		}
		tw.Flush()
	}
	return strings.TrimRight(b.String(), "\n")
}

func waitText(w *kernel.WaitDetail) string {
	if w == nil {
		return "-"
	}
	s := string(w.Kind)
	switch {
	case w.ChildPID != 0:
		s += fmt.Sprintf(" (child %d)", w.ChildPID)
	case !w.Until.IsZero():
		s += " until " + timestamp(w.Until)
	}
	if w.Tool != "" {
		s += fmt.Sprintf(", for %s call %s", w.Tool, w.CallID)
	}
	if w.Needs != "" {
		s += fmt.Sprintf(" %s, which needs %s", shorten(string(w.Arguments), 120), w.Needs)
	}
	if w.Attempt > 0 {
		s += fmt.Sprintf(", %d failed attempts", w.Attempt)
	}
	if len(w.Filter) > 0 && string(w.Filter) != "{}" && string(w.Filter) != "null" {
		s += ", filter " + shorten(string(w.Filter), 80)
	}
	return s
}

func objectsCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("objects", stderr)
	pid, ok := f.pid(args, stderr)
	if !ok {
		return exitUsage
	}
	return controlCommand(*f.dir, control.Request{Op: "objects", PID: pid}, *f.asJSON, stdout, stderr, "objects",
		func(b json.RawMessage) string {
			var metas []objects.Meta
			json.Unmarshal(b, &metas)
			var out strings.Builder
			tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "OID\tNAME\tKIND\tVERSION\tTIER\tBYTES\tPAYLOAD\tUPDATED")
			for _, m := range metas {
				state := "present"
				if m.PayloadLost {
					state = "lost"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", termText(m.OID), termText(m.Name), termText(m.Kind), m.Version, m.Tier, m.PayloadBytes, state, timestamp(m.UpdatedAt))
			}
			tw.Flush()
			return strings.TrimRight(out.String(), "\n")
		})
}

func objectCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("object", stderr)
	oid, ok := f.one(args, "<oid>", stderr)
	if !ok {
		return exitUsage
	}
	return controlCommand(*f.dir, control.Request{Op: "object", OID: oid}, *f.asJSON, stdout, stderr, "object",
		func(b json.RawMessage) string {
			var v kernel.ObjectView
			json.Unmarshal(b, &v)
			m := v.Meta
			var out strings.Builder
			tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "oid\t%s\nnamespace\t%s\nname\t%s\nkind\t%s\nversion\t%d\ntier\t%s\nowner\t%s\n",
				termText(m.OID), termText(m.Namespace), termText(m.Name), termText(m.Kind), m.Version, m.Tier, termText(m.Owner))
			fmt.Fprintf(tw, "bytes\t%d\nsha256\t%s\ncreated\t%s\nupdated\t%s\n", m.PayloadBytes, m.PayloadSHA256, timestamp(m.CreatedAt), timestamp(m.UpdatedAt))
			if len(m.Labels) > 0 {
				keys := make([]string, 0, len(m.Labels))
				for k := range m.Labels {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for i, k := range keys {
					keys[i] = k + "=" + m.Labels[k]
				}
				fmt.Fprintf(tw, "labels\t%s\n", termText(strings.Join(keys, ", ")))
			}
			tw.Flush()
			out.WriteString("\n")
			switch {
			case v.PayloadError != "":
				fmt.Fprintf(&out, "payload unavailable: %s", termText(v.PayloadError))
			case v.Payload != nil:
				var pretty any
				json.Unmarshal(v.Payload, &pretty)
				pb, _ := json.MarshalIndent(pretty, "", "  ")
				out.Write(termJSON(pb))
			case v.PayloadText != nil:
				out.WriteString(termLines(*v.PayloadText))
			default:
				fmt.Fprintf(&out, "(%d bytes of binary payload; --json shows it in base64)", len(v.PayloadBase64))
			}
			if v.Truncated {
				out.WriteString("\n(truncated)")
			}
			return out.String()
		})
}

func messagesCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("messages", stderr)
	all := f.fs.Bool("all", false, "every message, whatever its status (default: the unread ones)")
	pid, ok := f.pid(args, stderr)
	if !ok {
		return exitUsage
	}
	return controlCommand(*f.dir, control.Request{Op: "messages", PID: pid, All: *all}, *f.asJSON, stdout, stderr, "messages",
		func(b json.RawMessage) string {
			var l kernel.MessageList
			json.Unmarshal(b, &l)
			var out strings.Builder
			fmt.Fprintf(&out, "pid %d: %d unread of %d messages\n", l.PID, l.Unread, l.Total)
			if l.Omitted > 0 {
				fmt.Fprintf(&out, "(%d older messages left out; --json shows the same page)\n", l.Omitted)
			}
			if len(l.Messages) > 0 {
				tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tFROM\tKIND\tSTATUS\tSENT\tSUBJECT\tBODY")
				for _, m := range l.Messages {
					subject := m.Subject
					if subject == "" {
						subject = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termText(m.ID), termText(m.Sender), termText(string(m.Kind)), termText(string(m.Status)), timestamp(m.CreatedAt),
						termText(shorten(oneLine(subject), 40)), termText(shorten(oneLine(m.Body), 80)))
				}
				tw.Flush()
			}
			return strings.TrimRight(out.String(), "\n")
		})
}

func contextCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("context", stderr)
	pid, ok := f.pid(args, stderr)
	if !ok {
		return exitUsage
	}
	return controlCommand(*f.dir, control.Request{Op: "context", PID: pid}, *f.asJSON, stdout, stderr, "context",
		func(b json.RawMessage) string {
			var v kernel.ContextView
			json.Unmarshal(b, &v)
			var out strings.Builder
			fmt.Fprintf(&out, "context of pid %d: %s version %d, generation %d, ~%d tokens in %d entries\n", v.PID, v.OID, v.Version, v.Generation, v.EstimatedTokens, v.Entries)
			if v.Rebuilt {
				out.WriteString("(the payload did not survive a reopen: rebuilt from retained evidence)\n")
			}
			if v.SystemError != "" {
				fmt.Fprintf(&out, "(system prompt unavailable: %s)\n", termText(v.SystemError))
			}
			if v.Truncated {
				out.WriteString("(the oldest entries are left out to keep the answer bounded)\n")
			}
			for _, m := range v.Messages {
				head := "── " + string(m.Role)
				if m.Name != "" {
					head += " " + m.Name
				}
				if m.ToolCallID != "" {
					head += " (answers " + m.ToolCallID + ")"
				}
				fmt.Fprintf(&out, "\n%s\n", termText(head))
				// The content is printed over its lines, as the model sees it.
				if m.Content != "" {
					out.WriteString(termLines(m.Content) + "\n")
				}
				for _, tc := range m.ToolCalls {
					fmt.Fprintf(&out, "→ %s %s %s\n", termText(tc.ID), termText(tc.Name), termText(string(tc.Arguments)))
				}
			}
			return strings.TrimRight(out.String(), "\n")
		})
}
