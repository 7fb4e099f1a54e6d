package authority

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/internal/datadriven"
)

// TestScripts drives the table through testdata scripts:
//
//	table                          the whole table, entry by entry
//	requirements op=… [params]     what op on params needs, in order
//	check op=… [params]            each requirement decided against the
//	<grant lines>                  grants given as input, as the kernel does
//	tool name=…                    the operations a built-in tool names
//
// Params are oid=, namespace=, image=, own_image=, pid= and scope=; a grant
// line is "id effect resource rights[,…] [uses=N]".
func TestScripts(t *testing.T) {
	datadriven.Run(t, "testdata/*.txt", func(t *testing.T, c *datadriven.Case) string {
		out, err := run(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		return out
	})
}

func run(c *datadriven.Case) (string, error) {
	switch c.Cmd {
	case "table":
		var b strings.Builder
		for _, e := range Entries() {
			b.WriteString(formatEntry(e) + "\n")
		}
		return b.String(), nil
	case "requirements":
		op, p, err := opAndParams(c)
		if err != nil {
			return "", err
		}
		reqs, err := Requirements(op, p)
		if err != nil {
			return "error: " + err.Error(), nil
		}
		if len(reqs) == 0 {
			return "no right needed", nil
		}
		lines := make([]string, len(reqs))
		for i, q := range reqs {
			lines[i] = q.String()
		}
		return strings.Join(lines, "\n"), nil
	case "check":
		op, p, err := opAndParams(c)
		if err != nil {
			return "", err
		}
		grants, err := parseGrants(c.Input)
		if err != nil {
			return "", err
		}
		return check(grants, op, p), nil
	case "tool":
		name, _ := c.Arg("name")
		ops, ok := ToolOps(name)
		if !ok {
			return "no entry", nil
		}
		parts := make([]string, len(ops))
		for i, op := range ops {
			parts[i] = string(op)
		}
		return strings.Join(parts, " "), nil
	}
	return "", fmt.Errorf("unknown command %q", c.Cmd)
}

// check decides each requirement in order, reserving one-shot uses, and
// stops at the first refusal: what the kernel's check does.
func check(grants []capabilities.Grant, op Op, p Params) string {
	reqs, err := Requirements(op, p)
	if err != nil {
		return "error: " + err.Error()
	}
	var lines []string
	for _, q := range reqs {
		d := capabilities.Check(grants, q.Right, q.Names...)
		switch {
		case d.Ask:
			lines = append(lines, fmt.Sprintf("%s: ask (grant %s)", q, d.GrantID))
			return strings.Join(lines, "\n")
		case !d.Allowed:
			lines = append(lines, fmt.Sprintf("%s: denied: %s", q, d.Reason))
			return strings.Join(lines, "\n")
		}
		line := fmt.Sprintf("%s: allowed by %s on %s", q, d.GrantID, d.Name)
		if d.OneShot {
			next, _, err := capabilities.Reserve(grants, d)
			if err != nil {
				return "reserve error: " + err.Error()
			}
			grants = next
			line += " (one use reserved)"
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return "no right needed"
	}
	return strings.Join(lines, "\n")
}

func formatEntry(e Entry) string {
	needs := make([]string, len(e.Needs))
	for i, n := range e.Needs {
		needs[i] = string(n.Right) + " on " + strings.Join(n.Names, " ")
		if n.ExceptOwnImage {
			needs[i] += " (unless it is the caller's own image)"
		}
	}
	s := string(e.Op) + ": "
	if len(needs) == 0 {
		s += "no right"
	} else {
		s += strings.Join(needs, "; ")
	}
	if e.Hidden {
		s += " [hidden]"
	}
	if e.Rule != "" {
		s += "\n  rule: " + e.Rule
	}
	return s
}

func opAndParams(c *datadriven.Case) (Op, Params, error) {
	var op Op
	var p Params
	for _, a := range c.Args {
		switch a.Key {
		case "op":
			op = Op(a.Val)
		case "oid":
			p.OID = a.Val
		case "namespace":
			p.Namespace = a.Val
		case "image":
			p.Image = a.Val
		case "own_image":
			p.OwnImage = a.Val
		case "scope":
			p.Scope = a.Val
		case "pid":
			pid, err := strconv.ParseInt(a.Val, 10, 64)
			if err != nil {
				return "", p, err
			}
			p.PID = pid
		default:
			return "", p, fmt.Errorf("unknown argument %q", a.Key)
		}
	}
	return op, p, nil
}

func parseGrants(input string) ([]capabilities.Grant, error) {
	var out []capabilities.Grant
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 {
			return nil, fmt.Errorf("grant %q: want id effect resource rights [uses=N]", line)
		}
		rights, err := capabilities.ParseRights(f[3])
		if err != nil {
			return nil, err
		}
		g := capabilities.Grant{ID: f[0], Effect: capabilities.Effect(f[1]), Resource: f[2], Rights: rights}
		for _, extra := range f[4:] {
			n, ok := strings.CutPrefix(extra, "uses=")
			if !ok {
				return nil, fmt.Errorf("grant %q: unknown %q", line, extra)
			}
			uses, err := strconv.Atoi(n)
			if err != nil {
				return nil, err
			}
			g.UsesRemaining = capabilities.Uses(uses)
		}
		out = append(out, g)
	}
	return out, capabilities.ValidateGrants(out)
}
