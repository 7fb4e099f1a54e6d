package capabilities

import (
	"errors"
	"fmt"
	"github.com/libos/libos/internal/datadriven"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptState is what a capabilities script carries from case to case.
type scriptState struct {
	grants   []Grant
	reserved []Reservation
	accounts []Account
}

func TestScripts(t *testing.T) {
	var st *scriptState
	var script string
	datadriven.Run(t, "testdata/*.txt", func(t *testing.T, c *datadriven.Case) string {
		// Each script starts from nothing, as does a reset.
		file, _, _ := strings.Cut(c.Pos, ":")
		if file != script || c.Cmd == "reset" {
			st, script = &scriptState{}, file
		}
		out, err := st.run(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		return out
	})
}

func (st *scriptState) run(c *datadriven.Case) (string, error) {
	switch c.Cmd {
	case "reset":
		return "ok", nil
	case "grants":
		grants, err := parseGrantLines(c.Input)
		if err != nil {
			return "", err
		}
		if err := ValidateGrants(grants); err != nil {
			return "error: " + err.Error(), nil
		}
		st.grants = grants
		return formatGrants(st.grants), nil
	case "check":
		right, names, err := rightAndNames(c)
		if err != nil {
			return "", err
		}
		grants := st.grants
		if at, ok := c.Arg("at"); ok {
			now, err := time.Parse(time.RFC3339, at)
			if err != nil {
				return "", err
			}
			grants = Live(grants, now)
		}
		if v, _ := c.Arg("approved"); v == "true" {
			return formatDecision(Approved(grants, right, names...)), nil
		}
		return formatDecision(Check(grants, right, names...)), nil
	case "reserve":
		right, names, err := rightAndNames(c)
		if err != nil {
			return "", err
		}
		d := Check(st.grants, right, names...)
		next, r, err := Reserve(st.grants, d)
		if err != nil {
			return formatDecision(d) + "\nreserve error: " + err.Error(), nil
		}
		st.grants = next
		st.reserved = append(st.reserved, r)
		return fmt.Sprintf("%s\nreserved grant=%q before=%d\n%s", formatDecision(d), r.GrantID, r.Before, formatGrants(st.grants)), nil
	case "restore":
		// restore [n]: give back the n-th reservation made (default: the last).
		if len(st.reserved) == 0 {
			return "", errors.New("restore: nothing reserved")
		}
		n := len(st.reserved) - 1
		if w := c.Words(); len(w) == 1 {
			i, err := strconv.Atoi(w[0])
			if err != nil {
				return "", err
			}
			n = i
		}
		st.grants = Restore(st.grants, st.reserved[n])
		return formatGrants(st.grants), nil
	case "attenuate":
		requested, err := parseGrantLines(c.Input)
		if err != nil {
			return "", err
		}
		if err := Attenuate(st.grants, requested); err != nil {
			var we *WideningError
			kind := "error"
			if errors.As(err, &we) && errors.Is(err, ErrWidening) {
				kind = "widening"
			} else if errors.Is(err, ErrInvalidGrant) {
				kind = "invalid"
			}
			return kind + ": " + err.Error(), nil
		}
		return "ok", nil
	case "handdown":
		// handdown [at=RFC3339]: hand requested down from the grants as the
		// kernel does: Attenuate on the grants live at that time, then move
		// the uses Covers names, from the whole list.
		requested, err := parseGrantLines(c.Input)
		if err != nil {
			return "", err
		}
		live := st.grants
		if at, ok := c.Arg("at"); ok {
			now, err := time.Parse(time.RFC3339, at)
			if err != nil {
				return "", err
			}
			live = Live(st.grants, now)
		}
		if err := Attenuate(live, requested); err != nil {
			return "refused: " + err.Error(), nil
		}
		covers, err := Covers(st.grants, requested)
		if err != nil {
			return "covers error: " + err.Error(), nil
		}
		next, err := TakeUses(st.grants, requested, covers)
		if err != nil {
			return formatCovers(covers) + "\ntake error: " + err.Error(), nil
		}
		st.grants = next
		return formatCovers(covers) + "\n" + formatGrants(st.grants), nil
	case "inherit":
		// inherit: descend to a receiver holding the input grants and the
		// holder's InheritedDenies, validated as the kernel does.
		handed, err := parseGrantLines(c.Input)
		if err != nil {
			return "", err
		}
		child := append(handed, InheritedDenies(st.grants)...)
		if err := ValidateGrants(child); err != nil {
			return "error: " + err.Error(), nil
		}
		st.grants = child
		return formatGrants(st.grants), nil
	case "resources":
		var lines []string
		for _, r := range strings.Split(c.Input, "\n") {
			if err := ValidateResource(r); err != nil {
				lines = append(lines, "error: "+err.Error())
			} else {
				lines = append(lines, "ok "+r)
			}
		}
		return strings.Join(lines, "\n"), nil
	case "rights":
		rights, err := ParseRights(c.Input)
		if err != nil {
			return "error: " + err.Error(), nil
		}
		return fmt.Sprint(rights), nil
	case "accounts":
		accounts, err := parseAccounts(c.Input)
		if err != nil {
			return "", err
		}
		st.accounts = accounts
		return formatAccounts(st.accounts), nil
	case "charge":
		delta, err := parseBudget(c.Args)
		if err != nil {
			return "", err
		}
		next, err := Charge(st.accounts, delta)
		if err != nil {
			var be *BudgetError
			if errors.As(err, &be) {
				return fmt.Sprintf("exhausted budget=%s pid=%d: %v", be.Budget, be.PID, err), nil
			}
			return "error: " + err.Error(), nil
		}
		st.accounts = next
		return formatAccounts(st.accounts), nil
	case "min":
		a, err := parseBudget(parseArgs(c.Input, 0))
		if err != nil {
			return "", err
		}
		b, err := parseBudget(parseArgs(c.Input, 1))
		if err != nil {
			return "", err
		}
		return formatBudget(a.Min(b)), nil
	}
	return "", fmt.Errorf("unknown command %q", c.Cmd)
}

// parseArgs splits line n of input into key=value words.
func parseArgs(input string, n int) []datadriven.Word {
	lines := strings.Split(input, "\n")
	if n >= len(lines) {
		return nil
	}
	var out []datadriven.Word
	for _, f := range strings.Fields(lines[n]) {
		k, v, _ := strings.Cut(f, "=")
		out = append(out, datadriven.Word{Key: k, Val: v})
	}
	return out
}

func rightAndNames(c *datadriven.Case) (Right, []string, error) {
	w := c.Words()
	if len(w) < 1 {
		return "", nil, fmt.Errorf("%s: want a right and names", c.Cmd)
	}
	return Right(w[0]), w[1:], nil
}

// parseGrantLines reads "<id> <effect> <resource> <rights> [uses=N]
// [expires=RFC3339] [delegable=false]" per line;
// id "-" means empty, effect "-" means the zero effect.
func parseGrantLines(input string) ([]Grant, error) {
	var grants []Grant
	for _, line := range strings.Split(input, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 {
			return nil, fmt.Errorf("grant line %q: want id effect resource rights [uses=N]", line)
		}
		g := Grant{ID: f[0], Effect: Effect(f[1]), Resource: f[2]}
		if g.ID == "-" {
			g.ID = ""
		}
		if g.Effect == "-" {
			g.Effect = ""
		}
		for _, r := range strings.Split(f[3], ",") {
			g.Rights = append(g.Rights, Right(r))
		}
		for _, extra := range f[4:] {
			key, v, _ := strings.Cut(extra, "=")
			switch key {
			case "uses":
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, err
				}
				g.UsesRemaining = Uses(n)
			case "expires":
				t, err := time.Parse(time.RFC3339, v)
				if err != nil {
					return nil, err
				}
				g.ExpiresAt = &t
			case "delegable":
				d := v == "true"
				g.Delegable = &d
			default:
				return nil, fmt.Errorf("grant line %q: unknown %q", line, extra)
			}
		}
		grants = append(grants, g)
	}
	return grants, nil
}

func formatGrants(grants []Grant) string {
	var lines []string
	for _, g := range grants {
		uses := "unlimited"
		if g.UsesRemaining != nil {
			uses = fmt.Sprintf("uses=%d", *g.UsesRemaining)
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %v %s", g.ID, g.Effect, g.Resource, g.Rights, uses))
	}
	return strings.Join(lines, "\n")
}

func formatCovers(covers []Cover) string {
	lines := []string{"covers:"}
	for _, c := range covers {
		lines = append(lines, fmt.Sprintf("  requested[%d] %s by %s uses=%d", c.Index, c.Right, c.GrantID, c.Uses))
	}
	return strings.Join(lines, "\n")
}

func formatDecision(d Decision) string {
	verdict := "refused"
	switch {
	case d.Allowed:
		verdict = "allowed"
	case d.Ask:
		verdict = "ask"
	}
	return fmt.Sprintf("%s grant=%q one-shot=%v name=%q: %s", verdict, d.GrantID, d.OneShot, d.Name, d.Reason)
}

func parseBudget(args []datadriven.Word) (Budget, error) {
	var b Budget
	for _, a := range args {
		n, err := strconv.ParseInt(a.Val, 10, 64)
		if err != nil {
			return b, fmt.Errorf("budget %s: %w", a.Key, err)
		}
		found := false
		for _, f := range budgetFields {
			if f.name == a.Key {
				*f.get(&b) = n
				found = true
			}
		}
		if !found {
			return b, fmt.Errorf("unknown budget %q", a.Key)
		}
	}
	return b, nil
}

// parseAccounts reads "pid=N limits=tool_calls:1,children:2 used=..." per line.
func parseAccounts(input string) ([]Account, error) {
	var out []Account
	for _, line := range strings.Split(input, "\n") {
		var a Account
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "pid":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, err
				}
				a.PID = n
			case "limits", "used":
				var args []datadriven.Word
				for _, kv := range strings.Split(v, ",") {
					bk, bv, _ := strings.Cut(kv, ":")
					args = append(args, datadriven.Word{Key: bk, Val: bv})
				}
				b, err := parseBudget(args)
				if err != nil {
					return nil, err
				}
				if k == "limits" {
					a.Limits = b
				} else {
					a.Used = b
				}
			default:
				return nil, fmt.Errorf("account line %q: unknown %q", line, k)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func formatBudget(b Budget) string {
	var parts []string
	for _, f := range budgetFields {
		parts = append(parts, fmt.Sprintf("%s:%d", f.name, *f.get(&b)))
	}
	return strings.Join(parts, ",")
}

func formatAccounts(accounts []Account) string {
	var lines []string
	for _, a := range accounts {
		lines = append(lines, fmt.Sprintf("pid=%d used=%s", a.PID, formatBudget(a.Used)))
	}
	return strings.Join(lines, "\n")
}
