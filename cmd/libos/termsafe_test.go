package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscapeControls(t *testing.T) {
	for _, c := range []struct{ in, line, lines string }{
		{"plain text, €", "plain text, €", "plain text, €"},
		{"a\nb\tc", `a\nb\tc`, "a\nb\tc"},
		{"\x1b[2K\rdone", `\x1b[2K\rdone`, `\x1b[2K\rdone`},
		{"bell\a del\x7f", `bell\x07 del\x7f`, `bell\x07 del\x7f`},
		{"c1 \u009b2J nel\u0085", `c1 \u009b2J nel\u0085`, `c1 \u009b2J nel\u0085`},
		{"bad \xff\xc2 utf-8", `bad \xff\xc2 utf-8`, `bad \xff\xc2 utf-8`},
		{"U+FFFD \ufffd stays", "U+FFFD \ufffd stays", "U+FFFD \ufffd stays"},
	} {
		if got := termText(c.in); got != c.line {
			t.Errorf("termText(%q) = %q, want %q", c.in, got, c.line)
		}
		if got := termLines(c.in); got != c.lines {
			t.Errorf("termLines(%q) = %q, want %q", c.in, got, c.lines)
		}
	}
	// JSON keeps its value: only how it is written changes.
	v := map[string]string{"text": "\x1b]0;x\a \u009b \x7f \u0085 ok €"}
	raw, _ := json.Marshal(v)
	got := termJSON(raw)
	if controlIn(string(got)) != "" {
		t.Fatalf("termJSON left a control character: %q", got)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["text"] != v["text"] {
		t.Fatalf("termJSON changed the value: %q -> %q (%v)", raw, got, err)
	}
	indented, _ := json.MarshalIndent(v, "", "  ")
	if got := termJSON(indented); !strings.Contains(string(got), "\n  \"text\"") {
		t.Fatalf("termJSON changed the layout: %q", got)
	}
}

// controlIn returns the first control character of s that a terminal
// would obey (newlines and tabs apart), or "".
func controlIn(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\ufffd"):
			return s[i : i+1]
		case r == '\n' || r == '\t':
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return string(r)
		}
	}
	return ""
}

// escapesScript: the model writes escape sequences in its text, a tool
// name, arguments, a child's goal, an Object's name and a message; its
// spawn is held for approval.
const escapesScript = `
processes:
  - image: base:v0
    turns:
      - text: "\e[1A\e[2Kall is well\e]0;pwned\a"
        tool_calls:
          - name: "get_current_time\e[2K"
            arguments: {timezone: "UTC\e[8m"}
      - tool_calls:
          - name: create_object
            arguments: {namespace: "proc-1", name: "n\e[2Jame\u009b2J", payload: {v: "\x7f\u009b"}}
      - tool_calls:
          - name: send_process_message
            arguments: {recipient_pid: 1, body: "note\e[2K\u009b1A"}
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: "child\e[31m\u009b2J goal"}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
  - image: base:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {message: "bye\e[2K"}
`

// No printer of the CLI passes a model's control characters to the
// terminal: logs (-f included, the same printer), context, inspect,
// messages, objects, ps, approvals and the run's own trace, in text and in
// --json.
func TestModelTextReachesTheTerminalEscaped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(t.TempDir(), "escapes.yaml")
	if err := os.WriteFile(script, []byte(escapesScript), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(what, out string) {
		t.Helper()
		if c := controlIn(out); c != "" {
			t.Errorf("%s passes %q to the terminal:\n%q", what, c, out)
		}
	}
	stdout, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--dir", dir, "--script", script,
		"--grant", "process:spawn=write", "--ask", "process:spawn=write")
	if code != exitWaiting {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	check("run's stdout", stdout)
	check("run's trace", stderr)
	if !strings.Contains(stderr, `\x1b[2K`) {
		t.Fatalf("the trace does not show the escaped sequence:\n%s", stderr)
	}
	if _, stderr, code := runBin(t, "send", "1", "human \x1b[2K\u009b text", "--from", "ana", "--dir", dir); code != 0 {
		t.Fatalf("send: %s", stderr)
	}
	var objects []struct{ OID string }
	out, _, _ := runBin(t, "objects", "1", "--json", "--dir", dir)
	decodeJSON(t, "objects", out, &objects)
	for _, args := range [][]string{
		{"logs"}, {"logs", "--json"}, {"logs", "--pid", "1"}, {"context", "1"}, {"context", "1", "--json"},
		{"inspect", "1"}, {"inspect", "1", "--json"}, {"messages", "1", "--all"}, {"messages", "1", "--all", "--json"},
		{"objects", "1"}, {"objects", "1", "--json"}, {"ps"}, {"ps", "--json"}, {"approvals"}, {"approvals", "--json"},
		{"goal", "get", "1"},
	} {
		out, stderr, code := runBin(t, append(args, "--dir", dir)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, stderr)
		}
		check(strings.Join(args, " "), out)
		check(strings.Join(args, " ")+" (stderr)", stderr)
	}
	for _, o := range objects {
		out, _, _ := runBin(t, "object", o.OID, "--dir", dir)
		check("object "+o.OID, out)
		out, _, _ = runBin(t, "object", o.OID, "--json", "--dir", dir)
		check("object --json "+o.OID, out)
	}
	// The approval names the held spawn; the child's goal and its exit
	// go through the same printers once it ran.
	var held []struct {
		CallID string `json:"call_id"`
	}
	out, _, _ = runBin(t, "approvals", "--json", "--dir", dir)
	decodeJSON(t, "approvals", out, &held)
	if len(held) != 1 {
		t.Fatalf("approvals: %s", out)
	}
	if out, stderr, code := runBin(t, "approve", "1", held[0].CallID, "--dir", dir); code != 0 {
		t.Fatalf("approve: %s %s", out, stderr)
	}
	stdout, stderr, _ = runBin(t, "resume", "--dir", dir)
	check("resume's stdout", stdout)
	check("resume's trace", stderr)
	for _, args := range [][]string{{"goal", "get", "2"}, {"context", "2"}, {"logs", "--pid", "2"}, {"inspect", "2"}} {
		out, stderr, code := runBin(t, append(args, "--dir", dir)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, stderr)
		}
		check(strings.Join(args, " "), out)
	}
}
