package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
)

// controlCommand runs one control request against dir and prints its result:
// JSON with --json, else through text.
func controlCommand(dir string, req control.Request, asJSON bool, stdout, stderr io.Writer, name string, text func(json.RawMessage) string) int {
	resp, err := withRuntime(dir, req)
	return printControl(resp, err, asJSON, stdout, stderr, name, text)
}

// printControl prints a control request's answer as controlCommand does.
// text escapes the values it prints (termText); what it returns is escaped
// again over its lines, which changes nothing it escaped.
func printControl(resp control.Response, err error, asJSON bool, stdout, stderr io.Writer, name string, text func(json.RawMessage) string) int {
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		fmt.Fprintf(stderr, "libos %s: %s\n", name, termLines(err.Error()))
		return exitFailed
	}
	if asJSON || text == nil {
		fmt.Fprintln(stdout, string(termJSON(resp.Result)))
		return exitOK
	}
	fmt.Fprintln(stdout, termLines(text(resp.Result)))
	return exitOK
}

func parsePID(s string) (int64, error) {
	pid, err := strconv.ParseInt(s, 10, 64)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid %q: must be a positive integer", s)
	}
	return pid, nil
}

func checkpointCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos checkpoint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) == 0 {
		return usageError(stderr, fs.Name(), "want a verb: create, list, inspect, restore or fork")
	}
	verb, rest := pos[0], pos[1:]
	need := func(n int) bool {
		if len(rest) != n {
			usageError(stderr, fs.Name()+" "+verb, "want 1 argument, got %d", len(rest))
			return false
		}
		return true
	}
	pretty := func(b json.RawMessage) string {
		var v any
		json.Unmarshal(b, &v)
		out, _ := json.MarshalIndent(v, "", "  ")
		return string(termJSON(out))
	}
	switch verb {
	case "create":
		if !need(1) {
			return exitUsage
		}
		pid, err := parsePID(rest[0])
		if err != nil {
			return usageError(stderr, "libos checkpoint create", "%v", err)
		}
		// The new checkpoint's id alone, for scripts.
		return controlCommand(*dir, control.Request{Op: "checkpoint_create", PID: pid}, *asJSON, stdout, stderr, "checkpoint create",
			func(b json.RawMessage) string {
				var cp kernel.Checkpoint
				json.Unmarshal(b, &cp)
				return termText(cp.ID)
			})
	case "list":
		var pid int64
		if len(rest) > 1 {
			return usageError(stderr, "libos checkpoint list", "want at most one pid, got %d arguments", len(rest))
		}
		if len(rest) == 1 {
			if pid, err = parsePID(rest[0]); err != nil {
				return usageError(stderr, "libos checkpoint list", "%v", err)
			}
		}
		c, err := connect(*dir, true)
		var resp control.Response
		if err == nil {
			defer c.Close()
			if pid != 0 {
				err = c.requireProcess(pid)
			}
			if err == nil {
				resp, err = c.do(control.Request{Op: "checkpoint_list", PID: pid})
			}
		}
		return printControl(resp, err, *asJSON, stdout, stderr, "checkpoint list",
			func(b json.RawMessage) string {
				var cps []kernel.Checkpoint
				json.Unmarshal(b, &cps)
				var sb strings.Builder
				tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tROOT\tPROCESSES\tOBJECTS\tCREATED")
				for _, cp := range cps {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", termText(cp.ID), cp.RootPID, len(cp.PIDs), cp.Objects, cp.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
				}
				tw.Flush()
				return strings.TrimRight(sb.String(), "\n")
			})
	case "inspect", "restore", "fork":
		if !need(1) {
			return exitUsage
		}
		return controlCommand(*dir, control.Request{Op: "checkpoint_" + verb, Checkpoint: rest[0]}, *asJSON, stdout, stderr, "checkpoint "+verb, pretty)
	}
	return usageError(stderr, fs.Name(), "unknown verb %q: want create, list, inspect, restore or fork", verb)
}

func goalCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos goal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) == 0 || (pos[0] != "get" && pos[0] != "set") {
		return usageError(stderr, fs.Name(), "want get <pid> or set <pid> TEXT")
	}
	verb := pos[0]
	if want := map[string]int{"get": 2, "set": 3}[verb]; len(pos) != want {
		return usageError(stderr, fs.Name()+" "+verb, "want %s, got %s", map[string]string{"get": "<pid>", "set": "<pid> TEXT"}[verb], countArgs(len(pos)-1))
	}
	pid, err := parsePID(pos[1])
	if err != nil {
		return usageError(stderr, fs.Name()+" "+verb, "%v", err)
	}
	if verb == "get" {
		resp, err := withRuntime(*dir, control.Request{Op: "goal_get", PID: pid})
		var g kernel.GoalView
		code := printControl(resp, err, *asJSON, stdout, stderr, "goal get", func(b json.RawMessage) string {
			json.Unmarshal(b, &g)
			head := fmt.Sprintf("goal of pid %d: %s version %d", g.PID, termText(g.OID), g.Version)
			switch {
			case g.Error != "":
				return head
			case g.Recovered:
				head += " (recovered from retained evidence)"
			}
			// A goal is printed over its lines, as the model reads it.
			return head + "\n\n" + termLines(g.Text)
		})
		if code != exitOK {
			return code
		}
		json.Unmarshal(resp.Result, &g)
		// A goal that cannot be read is a failure a script must see: stdout
		// keeps what is known of it (its Object and version, or the JSON
		// with its error), stderr says why.
		if g.Error != "" {
			fmt.Fprintf(stderr, "libos goal get: goal of pid %d unavailable: %s\n", pid, termLines(g.Error))
			return exitFailed
		}
		return exitOK
	}
	return controlCommand(*dir, control.Request{Op: "goal_set", PID: pid, Goal: pos[2]}, *asJSON, stdout, stderr, "goal set",
		func(b json.RawMessage) string {
			var m struct {
				OID     string `json:"oid"`
				Version uint64 `json:"version"`
			}
			json.Unmarshal(b, &m)
			return fmt.Sprintf("goal %s is now version %d", termText(m.OID), m.Version)
		})
}
