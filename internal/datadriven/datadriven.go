// Package datadriven runs data-driven test scripts: files of commands with
// their expected output. The pure cores (capabilities, process) and the
// kernel as a whole are driven by them.
package datadriven

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The data-driven scripts in testdata/ are sequences of cases:
//
//	# comments and blank lines between cases are kept on rewrite
//	command arg key=value
//	optional input lines
//	----
//	expected output, up to the next blank line
//
// An expected output that itself contains blank lines is written between
// "----" / "----" and a closing "----" / "----" pair. Run with -rewrite to
// replace every expectation with the actual output.

var rewrite = flag.Bool("rewrite", false, "rewrite the expectations in testdata/ with the actual output")

// Word is one word of a command line: key=value, or a bare word with an empty value.
type Word struct{ Key, Val string }

// Case is one case of a script.
type Case struct {
	Pos      string // file:line of the command
	Cmd      string
	Args     []Word
	Input    string
	Expected string
}

// Arg returns the value of key=value, and whether it was given.
func (c *Case) Arg(key string) (string, bool) {
	for _, a := range c.Args {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// Words returns the bare words of the command line, in order.
func (c *Case) Words() []string {
	var out []string
	for _, a := range c.Args {
		if a.Val == "" && !strings.Contains(a.Key, "=") {
			out = append(out, a.Key)
		}
	}
	return out
}

// chunk is either verbatim text between cases or a case.
type chunk struct {
	text string
	c    *Case
}

func parse(t *testing.T, path string) []chunk {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read script: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var chunks []chunk
	for i := 0; i < len(lines); {
		line := strings.TrimRight(lines[i], " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			chunks = append(chunks, chunk{text: line})
			i++
			continue
		}
		c := &Case{Pos: fmt.Sprintf("%s:%d", path, i+1)}
		fields := strings.Fields(line)
		c.Cmd = fields[0]
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			c.Args = append(c.Args, Word{Key: k, Val: v})
		}
		i++
		var input []string
		for ; i < len(lines) && strings.TrimRight(lines[i], " \t") != "----"; i++ {
			input = append(input, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("%s: missing ---- after the command", c.Pos)
		}
		i++
		c.Input = strings.Join(input, "\n")
		var expected []string
		if i < len(lines) && strings.TrimRight(lines[i], " \t") == "----" {
			i++
			for ; i+1 < len(lines) && !(lines[i] == "----" && lines[i+1] == "----"); i++ {
				expected = append(expected, lines[i])
			}
			if i+1 >= len(lines) {
				t.Fatalf("%s: missing closing ---- ---- pair", c.Pos)
			}
			i += 2
		} else {
			for ; i < len(lines) && strings.TrimRight(lines[i], " \t") != ""; i++ {
				expected = append(expected, lines[i])
			}
		}
		c.Expected = strings.Join(expected, "\n")
		chunks = append(chunks, chunk{c: c})
	}
	return chunks
}

// Run runs every script matching glob, calling run for each case in
// order. run returns the actual output; a mismatch fails the test, or with
// -rewrite replaces the expectation.
func Run(t *testing.T, glob string, run func(t *testing.T, c *Case) string) {
	t.Helper()
	paths, err := filepath.Glob(glob)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts match %s (%v)", glob, err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			chunks := parse(t, path)
			var out strings.Builder
			for _, ch := range chunks {
				if ch.c == nil {
					out.WriteString(ch.text + "\n")
					continue
				}
				c := ch.c
				actual := strings.TrimRight(run(t, c), "\n")
				if !*rewrite && actual != c.Expected {
					t.Errorf("%s: %s\n--- expected\n%s\n--- actual\n%s", c.Pos, c.Cmd, c.Expected, actual)
				}
				writeCase(&out, c, actual)
			}
			if *rewrite {
				text := strings.TrimRight(out.String(), "\n") + "\n"
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatalf("rewrite %s: %v", path, err)
				}
			}
		})
	}
}

func writeCase(out *strings.Builder, c *Case, actual string) {
	out.WriteString(c.Cmd)
	for _, a := range c.Args {
		out.WriteString(" " + a.Key)
		if a.Val != "" {
			out.WriteString("=" + a.Val)
		}
	}
	out.WriteString("\n")
	if c.Input != "" {
		out.WriteString(c.Input + "\n")
	}
	out.WriteString("----\n")
	if strings.Contains(actual, "\n\n") || strings.HasPrefix(actual, "----") {
		out.WriteString("----\n" + actual + "\n----\n----\n")
		return
	}
	if actual != "" {
		out.WriteString(actual + "\n")
	}
}
