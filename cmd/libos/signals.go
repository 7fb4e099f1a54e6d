package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
)

// signalCommand is kill, pause or continue: a Host signal to one process,
// live through the control socket or on an idle directory opened directly.
// It prints each affected process's state after the signal.
func signalCommand(sig string) func([]string, io.Reader, io.Writer, io.Writer) int {
	return func(args []string, _ io.Reader, stdout, stderr io.Writer) int {
		f := newReadFlags(sig, stderr)
		pid, ok := f.pid(args, stderr)
		if !ok {
			return exitUsage
		}
		return controlCommand(*f.dir, control.Request{Op: "signal", PID: pid, Signal: sig}, *f.asJSON, stdout, stderr, sig,
			func(b json.RawMessage) string {
				var rep kernel.SignalReport
				json.Unmarshal(b, &rep)
				return signalText(rep)
			})
	}
}

func signalText(rep kernel.SignalReport) string {
	var lines []string
	for _, p := range rep.Processes {
		line := fmt.Sprintf("pid %d: %s", p.PID, p.Status)
		if p.PauseRequested {
			line += " (pauses when its running quantum ends)"
		}
		if p.PID == rep.PID && !rep.Changed {
			line += " (unchanged: nothing to " + rep.Signal + ")"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
