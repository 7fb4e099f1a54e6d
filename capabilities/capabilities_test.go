package capabilities

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMatchesCoversOverlaps(t *testing.T) {
	cases := []struct {
		a, b                     string
		matches, covers, overlap bool // Matches(a,b), covers(a,b), overlaps(a,b)
	}{
		{"clock:now", "clock:now", true, true, true},
		{"clock:now", "clock:sleep", false, false, false},
		{"clock:*", "clock:now", true, true, true},
		{"clock:*", "clock:*", true, true, true},
		{"clock:*", "clock:n*", true, true, true},
		{"clock:n*", "clock:*", false, false, true},
		{"clock:now", "clock:*", false, false, true},
		{"clock:now", "clock:now*", false, false, true},
		{"*", "object:x", true, true, true},
		{"*", "*", true, true, true},
		{"object_namespace:a*", "object_namespace:b*", false, false, false},
		{"object_namespace:a*", "object_namespace:ab", true, true, true},
		{"object_namespace:ab", "object_namespace:a*", false, false, true},
		{"scope:x", "scope:xy", false, false, false},
	}
	for _, c := range cases {
		if got := Matches(c.a, c.b); got != c.matches {
			t.Errorf("Matches(%q, %q) = %v, want %v", c.a, c.b, got, c.matches)
		}
		if got := covers(c.a, c.b); got != c.covers {
			t.Errorf("covers(%q, %q) = %v, want %v", c.a, c.b, got, c.covers)
		}
		if got := overlaps(c.a, c.b); got != c.overlap {
			t.Errorf("overlaps(%q, %q) = %v, want %v", c.a, c.b, got, c.overlap)
		}
		if overlaps(c.a, c.b) != overlaps(c.b, c.a) {
			t.Errorf("overlaps(%q, %q) is not symmetric", c.a, c.b)
		}
	}
}

func TestResourceConstructorsAreValid(t *testing.T) {
	for _, r := range []string{
		ClockNow, ClockSleep, ProcessSpawn, ContextMaintenance,
		ImageResource("base", "v0"),
		ObjectResource("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab"),
		NamespaceResource("proc-1"),
		CheckpointResource(12),
		ScopeResource("net.fetch"),
	} {
		if err := ValidateResource(r); err != nil {
			t.Errorf("ValidateResource(%q): %v", r, err)
		}
	}
	if got := ObjectNames("o", "ns"); !reflect.DeepEqual(got, []string{"object:o", "object_namespace:ns"}) {
		t.Errorf("ObjectNames = %q", got)
	}
	if err := ValidateResource(strings.Repeat("a", 10) + ":" + strings.Repeat("b", maxResourceLen)); !errors.Is(err, ErrInvalidResource) {
		t.Errorf("oversized resource: %v", err)
	}
	if err := ValidateResource("scope:\xff"); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

func TestGrantJSON(t *testing.T) {
	var g Grant
	if err := json.Unmarshal([]byte(`{"id":"g1","resource":"clock:now","rights":["read"]}`), &g); err != nil {
		t.Fatal(err)
	}
	if g.Effect != Allow || g.UsesRemaining != nil {
		t.Fatalf("decoded %+v: want effect allow and unlimited", g)
	}
	data, err := json.Marshal(Grant{ID: "g2", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Deny})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"g2","resource":"clock:sleep","rights":["read"],"effect":"deny"}`; string(data) != want {
		t.Fatalf("marshal = %s, want %s", data, want)
	}
	var back Grant
	one := Grant{ID: "g3", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(1)}
	data, _ = json.Marshal(one)
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, one) {
		t.Fatalf("round trip %s -> %+v (%v)", data, back, err)
	}
	if err := json.Unmarshal([]byte(`{"id":5}`), &back); err == nil {
		t.Fatal("a mistyped id decoded without error")
	}
}

func TestParseGrantSpec(t *testing.T) {
	g, err := ParseGrantSpec("cli-1", "object_namespace:a=b=read,write", Allow, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := Grant{ID: "cli-1", Resource: "object_namespace:a=b", Rights: []Right{Read, Write}, Effect: Allow}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("got %+v, want %+v", g, want)
	}
	one, err := ParseGrantSpec("cli-2", "clock:sleep=read@3", Allow, time.Time{})
	if err != nil || one.UsesRemaining == nil || *one.UsesRemaining != 3 || one.Resource != "clock:sleep" {
		t.Fatalf("one-shot spec: %+v %v", one, err)
	}
	for _, bad := range []struct{ spec, want string }{
		{"clock:sleep=read@0", "@USES"},
		{"clock:sleep=read@x", "@USES"},
		{"clock:now", "RESOURCE=RIGHTS"},
		{"clock:now=", "empty"},
		{"clock:now=fly", `"fly"`},
		{"clock:later=read", "clock:now or clock:sleep"},
	} {
		_, err := ParseGrantSpec("x", bad.spec, Deny, time.Time{})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseGrantSpec(%q) = %v, want an error containing %q", bad.spec, err, bad.want)
		}
	}
}

func TestCheckAndReserveDoNotMutate(t *testing.T) {
	grants := []Grant{
		{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(2)},
		{ID: "b", Resource: "clock:now", Rights: []Right{Read}, Effect: Allow},
	}
	orig := CloneGrants(grants)
	d := Check(grants, Read, ClockSleep)
	if !d.Allowed || !d.OneShot || d.GrantID != "a" {
		t.Fatalf("decision %+v", d)
	}
	next, r, err := Reserve(grants, d)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(grants, orig) {
		t.Fatalf("Reserve mutated its input: %+v", grants)
	}
	if *next[0].UsesRemaining != 1 || r != (Reservation{GrantID: "a", Before: 2}) {
		t.Fatalf("after reserve: uses %d, reservation %+v", *next[0].UsesRemaining, r)
	}
	if next[0].UsesRemaining == grants[0].UsesRemaining || &next[0].Rights[0] == &grants[0].Rights[0] {
		t.Fatal("Reserve result shares memory with its input")
	}
	snapshot := CloneGrants(next)
	back := Restore(next, r)
	if !reflect.DeepEqual(next, snapshot) {
		t.Fatal("Restore mutated its input")
	}
	if *back[0].UsesRemaining != 2 {
		t.Fatalf("restored uses = %d, want 2", *back[0].UsesRemaining)
	}
}

func TestReserveErrors(t *testing.T) {
	oneShot := []Grant{{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(1)}}
	d := Check(oneShot, Read, ClockSleep)
	cases := []struct {
		name   string
		grants []Grant
		d      Decision
		want   error
	}{
		{"refused decision", oneShot, Check(oneShot, Write, ClockSleep), ErrNotAllowed},
		{"grant gone", nil, d, ErrUnknownGrant},
		{"exhausted since", []Grant{{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(0)}}, d, ErrExhausted},
		{"now unlimited", []Grant{{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow}}, d, ErrStaleDecision},
		{"now a deny", []Grant{{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Deny}}, d, ErrStaleDecision},
	}
	for _, c := range cases {
		out, r, err := Reserve(c.grants, c.d)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		if out != nil || r != (Reservation{}) {
			t.Errorf("%s: returned grants %v and reservation %+v with an error", c.name, out, r)
		}
	}
}

func TestRestoreEdges(t *testing.T) {
	g := func(uses *int) []Grant {
		return []Grant{{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow, UsesRemaining: uses}}
	}
	cases := []struct {
		name   string
		grants []Grant
		r      Reservation
		want   *int
	}{
		{"zero reservation", g(Uses(0)), Reservation{}, Uses(0)},
		{"gives back one", g(Uses(0)), Reservation{GrantID: "a", Before: 1}, Uses(1)},
		{"never above before", g(Uses(1)), Reservation{GrantID: "a", Before: 1}, Uses(1)},
		{"does not lower a topped-up grant", g(Uses(5)), Reservation{GrantID: "a", Before: 1}, Uses(5)},
		{"grant now unlimited", g(nil), Reservation{GrantID: "a", Before: 1}, nil},
		{"grant gone", g(Uses(0)), Reservation{GrantID: "zz", Before: 1}, Uses(0)},
	}
	for _, c := range cases {
		out := Restore(c.grants, c.r)
		if !reflect.DeepEqual(out[0].UsesRemaining, c.want) {
			t.Errorf("%s: uses = %v, want %v", c.name, out[0].UsesRemaining, c.want)
		}
	}
}

func TestAttenuateErrorType(t *testing.T) {
	holder := []Grant{{ID: "h", Resource: "clock:now", Rights: []Right{Read}, Effect: Allow}}
	err := Attenuate(holder, []Grant{{Resource: "clock:now", Rights: []Right{Read, Write}, Effect: Allow}})
	var we *WideningError
	if !errors.As(err, &we) || !errors.Is(err, ErrWidening) {
		t.Fatalf("err = %v, want a *WideningError wrapping ErrWidening", err)
	}
	if we.Index != 0 || we.Right != Write || we.Resource != "clock:now" {
		t.Fatalf("widening error %+v", we)
	}
	err = Attenuate(holder, []Grant{{ID: "bad id", Resource: "clock:now", Rights: []Right{Read}, Effect: Allow}})
	if !errors.Is(err, ErrInvalidGrant) || errors.Is(err, ErrWidening) {
		t.Fatalf("invalid id: err = %v", err)
	}
	if err := Attenuate(nil, nil); err != nil {
		t.Fatalf("nothing requested: %v", err)
	}
}

func TestInheritedDenies(t *testing.T) {
	holder := []Grant{
		{ID: "a", Resource: "object_namespace:p", Rights: []Right{Read}, Effect: Allow},
		{ID: "d", Resource: "object_namespace:secret", Rights: []Right{Read}, Effect: Deny},
		{ID: "inherited:e", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Deny},
		{ID: "odd", Resource: "clock:now", Rights: []Right{Read}, Effect: "bogus"},
	}
	got := InheritedDenies(holder)
	want := []Grant{
		{ID: "inherited:d", Resource: "object_namespace:secret", Rights: []Right{Read}, Effect: Deny},
		{ID: "inherited:e", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Deny},
		{ID: "inherited:odd", Resource: "clock:now", Rights: []Right{Read}, Effect: Deny},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("InheritedDenies = %+v", got)
	}
	if err := ValidateGrants(got); err != nil {
		t.Fatal(err)
	}
	// A list that repeats an inherited id (a fork's may: its source's and
	// its caller's) still gives unique ids.
	repeated := []Grant{
		{ID: "inherited:d", Resource: "clock:now", Rights: []Right{Read}, Effect: Deny},
		{ID: "inherited:d", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Deny},
		{ID: "d", Resource: "clock:sleep", Rights: []Right{Write}, Effect: Deny},
	}
	got = InheritedDenies(repeated)
	if ids := []string{got[0].ID, got[1].ID, got[2].ID}; !reflect.DeepEqual(ids, []string{"inherited:d", "inherited:d~2", "inherited:d~3"}) {
		t.Fatalf("ids %q", ids)
	}
	if err := ValidateGrants(got); err != nil {
		t.Fatal(err)
	}
}

// Random grant lists over a small universe, checked against properties that
// must hold for every input.
var (
	propNames    = []string{"clock:now", "clock:sleep", "object:a", "object:b", "object_namespace:a", "object_namespace:ab", "object_namespace:b", "scope:x", "scope:xy"}
	propPatterns = []string{"*", "clock:*", "object:*", "object_namespace:*", "object_namespace:a*", "scope:x*", "o*"}
	propRights   = []Right{Read, Write, Admin}
)

func randomGrants(rng *rand.Rand, n int, prefix string) []Grant {
	grants := make([]Grant, n)
	for i := range grants {
		g := Grant{ID: prefix + string(rune('a'+i)), Effect: Allow}
		if rng.IntN(2) == 0 {
			g.Resource = propNames[rng.IntN(len(propNames))]
		} else {
			g.Resource = propPatterns[rng.IntN(len(propPatterns))]
		}
		for _, r := range propRights {
			if rng.IntN(2) == 0 {
				g.Rights = append(g.Rights, r)
			}
		}
		if len(g.Rights) == 0 {
			g.Rights = []Right{Read}
		}
		switch rng.IntN(5) {
		case 0:
			g.Effect = Deny
		case 1:
			g.UsesRemaining = Uses(rng.IntN(3))
		}
		grants[i] = g
	}
	return grants
}

func TestCheckProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 3000; iter++ {
		grants := randomGrants(rng, 1+rng.IntN(6), "g")
		right := propRights[rng.IntN(len(propRights))]
		names := []string{propNames[rng.IntN(len(propNames))], propNames[rng.IntN(len(propNames))]}
		d := Check(grants, right, names...)
		var denied, unlimited, usable bool
		for _, g := range grants {
			for _, n := range names {
				if !g.Has(right) || !Matches(g.Resource, n) {
					continue
				}
				switch {
				case g.Effect == Deny:
					denied = true
				case g.UsesRemaining == nil:
					unlimited, usable = true, true
				case *g.UsesRemaining > 0:
					usable = true
				}
			}
		}
		if d.Allowed != (!denied && usable) {
			t.Fatalf("Check(%+v, %s, %q) = %+v; denied=%v usable=%v", grants, right, names, d, denied, usable)
		}
		if d.Allowed && d.OneShot == unlimited {
			t.Fatalf("Check chose a one-shot while an unlimited grant applies (or the reverse): %+v", d)
		}
	}
}

// TestAttenuateNeverWidens: whatever Attenuate accepts, given the holder's
// inherited denies as well, allows nothing the holder is not allowed.
func TestAttenuateNeverWidens(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for iter := 0; iter < 20000; iter++ {
		holder := randomGrants(rng, 1+rng.IntN(5), "h")
		requested := randomGrants(rng, 1+rng.IntN(3), "r")
		if Attenuate(holder, requested) != nil {
			continue
		}
		accepted++
		child := append(CloneGrants(requested), InheritedDenies(holder)...)
		for _, right := range propRights {
			for _, a := range propNames {
				// On a single name, literal comparison is enough without inherited denies.
				if Check(requested, right, a).Allowed && !Check(holder, right, a).Allowed {
					t.Fatalf("widened: holder %+v, requested %+v: allowed %s on %s", holder, requested, right, a)
				}
				for _, b := range propNames {
					if Check(child, right, a, b).Allowed && !Check(holder, right, a, b).Allowed {
						t.Fatalf("widened: holder %+v, requested %+v: child allowed %s on %s/%s", holder, requested, right, a, b)
					}
				}
			}
			for _, req := range requested {
				if req.Effect == Deny || !req.Has(right) || req.UsesRemaining == nil {
					continue
				}
				// A handed-down one-shot never exceeds what some covering holder grant has left.
				enough := false
				for _, h := range holder {
					if h.Effect == Allow && h.Has(right) && covers(h.Resource, req.Resource) &&
						(h.UsesRemaining == nil || *h.UsesRemaining >= max(*req.UsesRemaining, 1)) {
						enough = true
					}
				}
				if !enough {
					t.Fatalf("accepted one-shot %+v not covered by %+v", req, holder)
				}
			}
		}
	}
	if accepted < 500 {
		t.Fatalf("only %d random requests were accepted; the property was barely exercised", accepted)
	}
}

func TestBudgetErrorsAndImmutability(t *testing.T) {
	chain := []Account{
		{PID: 2, Limits: Budget{ToolCalls: 3}, Used: Budget{ToolCalls: 1}},
		{PID: 1, Limits: Budget{ToolCalls: 2}, Used: Budget{ToolCalls: 2}},
	}
	orig := append([]Account(nil), chain...)
	_, err := Charge(chain, Budget{ToolCalls: 1})
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("err = %v, want *BudgetError wrapping ErrBudgetExhausted", err)
	}
	if *be != (BudgetError{Budget: "tool_calls", PID: 1, Limit: 2, Used: 2, Requested: 1}) {
		t.Fatalf("budget error %+v", be)
	}
	for _, want := range []string{"tool_calls", "process 1", "limit 2", "used 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !reflect.DeepEqual(chain, orig) {
		t.Fatal("Charge mutated its input")
	}
	next, err := Charge(chain[:1], Budget{ToolCalls: 2, WallSeconds: 9})
	if err != nil {
		t.Fatal(err)
	}
	if next[0].Used != (Budget{ToolCalls: 3, WallSeconds: 9}) || chain[0].Used.ToolCalls != 1 {
		t.Fatalf("charged %+v; input now %+v", next[0].Used, chain[0].Used)
	}
	bad := []struct {
		chain []Account
		delta Budget
		want  string
	}{
		{nil, Budget{}, "chain"},
		{chain, Budget{LLMTokens: -5}, "llm_tokens"},
		{[]Account{{PID: 1, Limits: Budget{Children: -1}}}, Budget{}, "children"},
		{[]Account{{PID: 1, Used: Budget{WallSeconds: -1}}}, Budget{}, "wall_seconds"},
	}
	for _, c := range bad {
		_, err := Charge(c.chain, c.delta)
		if !errors.Is(err, ErrInvalidBudget) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Charge(%+v, %+v) = %v, want ErrInvalidBudget naming %s", c.chain, c.delta, err, c.want)
		}
	}
}

func TestBudgetMin(t *testing.T) {
	cases := []struct{ a, b, want Budget }{
		{Budget{}, Budget{}, Budget{}},
		{Budget{ToolCalls: 5}, Budget{}, Budget{ToolCalls: 5}},
		{Budget{}, Budget{ToolCalls: 5}, Budget{ToolCalls: 5}},
		{Budget{ToolCalls: 5, Children: 1}, Budget{ToolCalls: 3, Children: 2}, Budget{ToolCalls: 3, Children: 1}},
		{Budget{LLMCalls: 1, LLMTokens: 2, WallSeconds: 3}, Budget{LLMCalls: 4, LLMTokens: 1, WallSeconds: 9}, Budget{LLMCalls: 1, LLMTokens: 1, WallSeconds: 3}},
	}
	for _, c := range cases {
		if got := c.a.Min(c.b); got != c.want {
			t.Errorf("%+v.Min(%+v) = %+v, want %+v", c.a, c.b, got, c.want)
		}
		if got := c.b.Min(c.a); got != c.want {
			t.Errorf("Min is not symmetric for %+v, %+v", c.a, c.b)
		}
	}
	data, _ := json.Marshal(Budget{ToolCalls: 1, LLMCalls: 2, LLMTokens: 3, Children: 4, WallSeconds: 5})
	if want := `{"tool_calls":1,"llm_calls":2,"llm_tokens":3,"children":4,"wall_seconds":5}`; string(data) != want {
		t.Fatalf("budget JSON %s, want %s", data, want)
	}
}

// TestSharedGrantsAreOnlyRead runs the pure functions concurrently on one
// grant list; under -race any write to it would be reported.
func TestSharedGrantsAreOnlyRead(t *testing.T) {
	grants := []Grant{
		{ID: "a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(3)},
		{ID: "b", Resource: "object_namespace:*", Rights: []Right{Read, Write}, Effect: Allow},
		{ID: "c", Resource: "object_namespace:secret", Rights: []Right{Write}, Effect: Deny},
	}
	if !grants[0].OneShot() || grants[1].OneShot() {
		t.Fatal("OneShot misreports")
	}
	done := make(chan error, 8)
	for range 8 {
		go func() {
			for range 200 {
				d := Check(grants, Read, ClockSleep)
				next, r, err := Reserve(grants, d)
				if err != nil {
					done <- err
					return
				}
				Restore(next, r)
				if err := Attenuate(grants, []Grant{{Resource: "object_namespace:a", Rights: []Right{Read}, Effect: Allow}}); err != nil {
					done <- err
					return
				}
				InheritedDenies(grants)
				handed := []Grant{{Resource: ClockSleep, Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(2)}}
				covers, err := Covers(grants, handed)
				if err == nil {
					_, err = TakeUses(grants, handed, covers)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if *grants[0].UsesRemaining != 3 {
		t.Fatalf("shared grant changed to %d uses", *grants[0].UsesRemaining)
	}
}

// TestBudgetFieldsCoverBudget: budgetFields lists every field of Budget
// once, in declaration order, named by its JSON name, and get returns that
// field, so a field added to Budget is charged and validated.
func TestBudgetFieldsCoverBudget(t *testing.T) {
	typ := reflect.TypeFor[Budget]()
	if len(budgetFields) != typ.NumField() {
		t.Fatalf("budgetFields has %d entries, Budget %d fields", len(budgetFields), typ.NumField())
	}
	for i, f := range budgetFields {
		sf := typ.Field(i)
		if name := strings.Split(sf.Tag.Get("json"), ",")[0]; f.name != name {
			t.Errorf("budgetFields[%d] is named %q, Budget's field %d %s is %q in JSON", i, f.name, i, sf.Name, name)
		}
		var b Budget
		*f.get(&b) = 7
		if got := reflect.ValueOf(b).Field(i).Int(); got != 7 {
			t.Errorf("budgetFields[%d] (%s) gets another field than %s", i, f.name, sf.Name)
		}
	}
}

// randomHandDown is randomGrants with asks (some inherited) and grants that
// may not be handed down: the holder side of a hand-down.
func randomHandDown(rng *rand.Rand, n int, prefix string) []Grant {
	grants := randomGrants(rng, n, prefix)
	for i := range grants {
		g := &grants[i]
		switch rng.IntN(6) {
		case 0:
			g.Effect, g.UsesRemaining = Ask, nil
		case 1:
			g.Effect, g.UsesRemaining = Ask, nil
			g.ID = InheritedDenyPrefix + g.ID
		case 2:
			no := false
			g.Delegable = &no
		case 3:
			if g.Effect == Allow {
				g.UsesRemaining = Uses(1 + rng.IntN(3))
			}
		}
	}
	return grants
}

// TestHandDownProperties: whatever Attenuate accepts, Covers names for every
// right of every requested allow or ask grant a holder grant Attenuate's rules
// let cover it, TakeUses moves exactly the uses those covers say from
// exactly those grants and never below zero, every requested one-shot's
// uses come out of each one-shot covering it, and the receiver (with the
// holder's inherited denies and asks) is allowed nothing, approved or not,
// the holder is not.
func TestHandDownProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	accepted, moved := 0, 0
	for iter := 0; iter < 20000; iter++ {
		holder := randomHandDown(rng, 1+rng.IntN(5), "h")
		requested := randomGrants(rng, 1+rng.IntN(3), "r")
		for i := range requested {
			if h := holder[rng.IntN(len(holder))]; rng.IntN(2) == 0 {
				// Often a copy of one of the holder's, to be accepted.
				requested[i].Resource, requested[i].Rights = h.Resource, h.Rights[:1+rng.IntN(len(h.Rights))]
				if h.UsesRemaining != nil && *h.UsesRemaining > 0 {
					requested[i].Effect, requested[i].UsesRemaining = Allow, Uses(1+rng.IntN(*h.UsesRemaining))
				}
			}
			switch r := &requested[i]; {
			case r.Effect != Allow:
			case rng.IntN(5) == 0:
				r.Effect, r.UsesRemaining = Ask, nil
			case r.UsesRemaining != nil && *r.UsesRemaining == 0:
				r.UsesRemaining = Uses(1)
			}
		}
		if Attenuate(holder, requested) != nil {
			continue
		}
		accepted++
		cs, err := Covers(holder, requested)
		if err != nil {
			t.Fatalf("Attenuate accepted %+v from %+v, Covers refused: %v", requested, holder, err)
		}
		after, err := TakeUses(holder, requested, cs)
		if err != nil {
			t.Fatalf("Attenuate accepted %+v from %+v, TakeUses refused: %v", requested, holder, err)
		}
		taken := map[string]int{}
		for _, c := range cs {
			req, h := requested[c.Index], holder[grantIndex(holder, c.GrantID)]
			if !h.Has(c.Right) || !covers(h.Resource, req.Resource) || !h.CanDelegate() || h.Effect == Deny ||
				(h.Effect == Ask && (req.Effect != Ask || h.Inherited())) {
				t.Fatalf("cover %+v of %+v by %+v", c, req, h)
			}
			if req.UsesRemaining != nil && h.UsesRemaining != nil {
				n := 0
				for _, o := range cs {
					if o.Index == c.Index && o.GrantID == c.GrantID {
						n += o.Uses
					}
				}
				if n != *req.UsesRemaining {
					t.Fatalf("requested %+v takes %d uses of %+v, want %d", req, n, h, *req.UsesRemaining)
				}
			}
			taken[c.GrantID] += c.Uses
		}
		for i, right := 0, Right(""); i < len(requested); i++ {
			if requested[i].Effect == Deny {
				continue
			}
			for _, right = range requested[i].Rights {
				if !slices.ContainsFunc(cs, func(c Cover) bool { return c.Index == i && c.Right == right }) {
					t.Fatalf("no cover of %s of %+v: %+v", right, requested[i], cs)
				}
			}
		}
		for j, h := range holder {
			if h.UsesRemaining == nil {
				continue
			}
			if got := *h.UsesRemaining - *after[j].UsesRemaining; got != taken[h.ID] || *after[j].UsesRemaining < 0 {
				t.Fatalf("grant %+v lost %d uses (now %d), covers take %d", h, got, *after[j].UsesRemaining, taken[h.ID])
			}
			if taken[h.ID] > 0 {
				moved++
			}
		}
		child := append(CloneGrants(requested), InheritedDenies(holder)...)
		for _, right := range propRights {
			for _, a := range propNames {
				for _, b := range propNames {
					if Check(child, right, a, b).Allowed && !Check(holder, right, a, b).Allowed {
						t.Fatalf("widened: holder %+v, requested %+v: child allowed %s on %s/%s", holder, requested, right, a, b)
					}
					if Approved(child, right, a, b).Allowed && !Approved(holder, right, a, b).Allowed {
						t.Fatalf("widened: holder %+v, requested %+v: child allowed %s on %s/%s once approved", holder, requested, right, a, b)
					}
				}
			}
		}
	}
	if accepted < 2000 || moved < 400 {
		t.Fatalf("only %d random requests were accepted, %d moved uses; the property was barely exercised", accepted, moved)
	}
}

// TestInheritedIDsNeverCollide: down any chain of receivers, each handed
// grants under ids of its own (never the inherited prefix), the grants a
// receiver holds are valid, ids unique, and a rule is inherited once.
func TestInheritedIDsNeverCollide(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 2000; iter++ {
		holder := randomHandDown(rng, 1+rng.IntN(5), "c")
		for depth := 0; depth < 6; depth++ {
			handed := randomHandDown(rng, rng.IntN(4), "c")
			for i := range handed {
				handed[i].ID = strings.TrimPrefix(handed[i].ID, InheritedDenyPrefix)
			}
			inherited := InheritedDenies(holder)
			child := append(handed, inherited...)
			// The resources are not all valid names; the ids are what is checked.
			seen := map[string]bool{}
			for _, g := range child {
				if err := validateGrantID(g.ID); err != nil || seen[g.ID] {
					t.Fatalf("depth %d: holder %+v, handed %+v: id %q: %v (or already used)", depth, holder, handed, g.ID, err)
				}
				seen[g.ID] = true
			}
			for i, g := range inherited {
				if !g.Inherited() || g.UsesRemaining != nil || g.Delegable != nil {
					t.Fatalf("inherited grant %+v", g)
				}
				for _, o := range inherited[:i] {
					if sameRule(g, o) {
						t.Fatalf("rule %+v inherited twice: %+v", g, inherited)
					}
				}
			}
			if again := InheritedDenies(inherited); !reflect.DeepEqual(again, inherited) {
				t.Fatalf("inheriting inherited grants renamed them: %+v, then %+v", inherited, again)
			}
			holder = child
		}
	}
}

// TakeUses moves any number of uses in one step: its cost does not grow
// with them.
func TestTakeUsesInOneStep(t *testing.T) {
	holder := []Grant{{ID: "big", Resource: ClockSleep, Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(2_000_000)}}
	requested := []Grant{{ID: "c1", Resource: ClockSleep, Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(2_000_000)}}
	covers, err := Covers(holder, requested)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := TakeUses(holder, requested, covers); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Fatalf("TakeUses of 2,000,000 uses made %v allocations", allocs)
	}
	if *holder[0].UsesRemaining != 2_000_000 {
		t.Fatal("TakeUses changed its input")
	}
}

// The inherited mark is the id, so a grant read back from JSON, a record
// written before the mark meant anything included, is still inherited.
func TestInheritedMarkSurvivesJSON(t *testing.T) {
	var grants []Grant
	old := `[{"id":"inherited:q","resource":"clock:sleep","rights":["read"],"effect":"ask"}]`
	if err := json.Unmarshal([]byte(old), &grants); err != nil {
		t.Fatal(err)
	}
	if !grants[0].Inherited() || Check(grants, Read, ClockSleep).Ask || Approved(grants, Read, ClockSleep).Allowed {
		t.Fatalf("%+v read back as an ask of its own", grants[0])
	}
	data, err := json.Marshal(InheritedDenies([]Grant{{ID: "q", Resource: ClockSleep, Rights: []Right{Read}, Effect: Ask}}))
	if err != nil || string(data) != old {
		t.Fatalf("encoded %s (%v), want %s", data, err, old)
	}
}
