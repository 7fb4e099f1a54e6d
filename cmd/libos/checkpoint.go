package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/libos/libos/kernel"
)

// controlCommand runs one control request against dir and prints its result:
// JSON with --json, else through text.
func controlCommand(dir string, req kernel.ControlRequest, asJSON bool, stdout, stderr io.Writer, name string, text func(json.RawMessage) string) int {
	resp, err := withRuntime(dir, req)
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		fmt.Fprintf(stderr, "libos %s: %v\n", name, err)
		return exitFailed
	}
	if asJSON || text == nil {
		fmt.Fprintln(stdout, string(resp.Result))
		return exitOK
	}
	fmt.Fprintln(stdout, text(resp.Result))
	return exitOK
}

func parsePID(s string) (int64, error) {
	pid, err := strconv.ParseInt(s, 10, 64)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid %q: must be a positive integer", s)
	}
	return pid, nil
}

const checkpointUsage = `usage: libos checkpoint <create <pid> | list [pid] | inspect <id> | restore <id> | fork <id>> [--dir DIR] [--json]`

func checkpointCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos checkpoint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "./.libos", "runtime directory")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, checkpointUsage)
		return exitUsage
	}
	verb, rest := pos[0], pos[1:]
	need := func(n int) bool {
		if len(rest) != n {
			fmt.Fprintln(stderr, checkpointUsage)
			return false
		}
		return true
	}
	pretty := func(b json.RawMessage) string {
		var v any
		json.Unmarshal(b, &v)
		out, _ := json.MarshalIndent(v, "", "  ")
		return string(out)
	}
	switch verb {
	case "create":
		if !need(1) {
			return exitUsage
		}
		pid, err := parsePID(rest[0])
		if err != nil {
			fmt.Fprintf(stderr, "libos checkpoint create: %v\n", err)
			return exitUsage
		}
		// The new checkpoint's id alone, for scripts.
		return controlCommand(*dir, kernel.ControlRequest{Op: "checkpoint_create", PID: pid}, *asJSON, stdout, stderr, "checkpoint create",
			func(b json.RawMessage) string {
				var cp kernel.Checkpoint
				json.Unmarshal(b, &cp)
				return cp.ID
			})
	case "list":
		var pid int64
		if len(rest) > 1 {
			fmt.Fprintln(stderr, checkpointUsage)
			return exitUsage
		}
		if len(rest) == 1 {
			if pid, err = parsePID(rest[0]); err != nil {
				fmt.Fprintf(stderr, "libos checkpoint list: %v\n", err)
				return exitUsage
			}
		}
		return controlCommand(*dir, kernel.ControlRequest{Op: "checkpoint_list", PID: pid}, *asJSON, stdout, stderr, "checkpoint list",
			func(b json.RawMessage) string {
				var cps []kernel.Checkpoint
				json.Unmarshal(b, &cps)
				var lines []string
				for _, cp := range cps {
					lines = append(lines, fmt.Sprintf("%s\troot %d\t%d processes\t%d objects\t%s", cp.ID, cp.RootPID, len(cp.PIDs), cp.Objects, cp.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")))
				}
				return strings.Join(lines, "\n")
			})
	case "inspect", "restore", "fork":
		if !need(1) {
			return exitUsage
		}
		return controlCommand(*dir, kernel.ControlRequest{Op: "checkpoint_" + verb, Checkpoint: rest[0]}, *asJSON, stdout, stderr, "checkpoint "+verb, pretty)
	}
	fmt.Fprintf(stderr, "libos checkpoint: unknown verb %q\n%s\n", verb, checkpointUsage)
	return exitUsage
}

func goalCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos goal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "./.libos", "runtime directory")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 3 || pos[0] != "set" {
		fmt.Fprintln(stderr, "usage: libos goal set <pid> TEXT [--dir DIR] [--json]")
		return exitUsage
	}
	pid, err := parsePID(pos[1])
	if err != nil {
		fmt.Fprintf(stderr, "libos goal set: %v\n", err)
		return exitUsage
	}
	return controlCommand(*dir, kernel.ControlRequest{Op: "goal_set", PID: pid, Goal: pos[2]}, *asJSON, stdout, stderr, "goal set",
		func(b json.RawMessage) string {
			var m struct {
				OID     string `json:"oid"`
				Version uint64 `json:"version"`
			}
			json.Unmarshal(b, &m)
			return fmt.Sprintf("goal %s is now version %d", m.OID, m.Version)
		})
}
