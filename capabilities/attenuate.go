package capabilities

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ErrWidening is wrapped by the error Attenuate returns when a requested grant
// is not covered by the holder's grants.
var ErrWidening = errors.New("capability widening refused")

// WideningError names the first requested grant and right that the holder
// does not cover, and why. It wraps ErrWidening.
type WideningError struct {
	Index    int    // position in the requested list
	GrantID  string // may be empty: requested grants need not be named yet
	Resource string
	Right    Right
	Rule     string // the broken rule, in words
}

func (e *WideningError) Error() string {
	return fmt.Sprintf("%v: requested[%d] (id %q, resource %q): right %q: %s", ErrWidening, e.Index, e.GrantID, e.Resource, e.Right, e.Rule)
}

// Unwrap returns ErrWidening.
func (e *WideningError) Unwrap() error { return ErrWidening }

// Attenuate checks that every requested grant is covered by holder, so that a
// grant handed to another process can only narrow what the holder has:
//
//   - a deny grant is always accepted (it only takes authority away);
//   - for an allow grant, every right must be allowed by a single usable holder
//     grant on the whole requested resource: an exact resource by an equal name
//     or a matching pattern, a pattern only by a holder pattern whose prefix is
//     equal or shorter;
//   - no holder deny of that right may overlap the requested resource, since
//     the request would otherwise allow something the holder is denied;
//   - when only one-shot holder grants cover a right, the request must itself
//     be one-shot with no more uses than one of them has left once the
//     requested grants before it took theirs (uses move, see Covers);
//   - an inherited ask of the holder (Grant.Inherited) covers nothing, since
//     alone it grants nothing.
//
// Attenuate itself takes no use: Covers says which holder grant covers each
// right, and TakeUses moves the uses.
//
// Attenuate compares resource names literally: it cannot know which namespace
// an "object:<oid>" belongs to, so a holder's deny on "object_namespace:<ns>"
// does not stop a request for one Object in it. Give the receiver
// InheritedDenies(holder) along with the accepted grants to close that gap.
//
// Requested grants
// are validated first (their ids may still be empty); an invalid one gives an
// error wrapping ErrInvalidGrant. Otherwise the first uncovered grant and
// right give a *WideningError. Nothing is mutated.
func Attenuate(holder, requested []Grant) error {
	_, err := attenuate(holder, requested, true)
	return err
}

// Cover names the holder grant by which one right of one requested allow or
// ask grant is covered.
type Cover struct {
	Index   int    // position in the requested list
	Right   Right  // the right covered
	GrantID string // the holder grant that covers it
	// Uses is what handing the requested grant down takes from the holder
	// grant: the requested one-shot's uses when the holder grant is one-shot
	// too and covers no earlier right of the same request (a receiver spends
	// a use on any of its rights, so each covering one-shot gives it all of
	// them), else 0.
	Uses int
}

// Covers is the coverage Attenuate accepts requested by: for every right of
// every requested allow or ask grant, the holder grant that covers it, read
// by Attenuate's rules but for the holder's denies and asks that overlap the
// request, which it does not look at. Use it on a list Attenuate accepted,
// to move the uses (TakeUses): a caller that decided on Live grants may pass
// the whole list, since an expired grant covers only a request that expires
// no later, one already expired itself.
//
// Among the grants that may cover a right an unlimited one comes first, so
// that no use moves needlessly, then the first one-shot, in holder order,
// with enough uses left once the requested grants before took theirs.
func Covers(holder, requested []Grant) ([]Cover, error) {
	return attenuate(holder, requested, false)
}

func attenuate(holder, requested []Grant, overlapRules bool) ([]Cover, error) {
	var out []Cover
	// left is what each one-shot holder grant has once the requested grants
	// so far took theirs; filled as it is needed.
	var left map[int]int
	for i, req := range requested {
		if req.ID != "" {
			if err := validateGrantID(req.ID); err != nil {
				return nil, fmt.Errorf("requested[%d]: %w", i, err)
			}
		}
		if err := validateGrantBody(req); err != nil {
			return nil, fmt.Errorf("requested[%d]: %w", i, err)
		}
		if req.Effect == Deny {
			continue
		}
		// An ask grant handed down is covered by what covers an allow, or by
		// an ask of the holder's own (not inherited): it narrows either.
		var from []int // the holder grants this request takes uses from
		for _, right := range req.Rights {
			if overlapRules {
				if rule := overlapRule(holder, req, right); rule != "" {
					return nil, &WideningError{Index: i, GrantID: req.ID, Resource: req.Resource, Right: right, Rule: rule}
				}
			}
			j, rule := coverOf(holder, req, right, left)
			if rule != "" {
				return nil, &WideningError{Index: i, GrantID: req.ID, Resource: req.Resource, Right: right, Rule: rule}
			}
			c := Cover{Index: i, Right: right, GrantID: holder[j].ID}
			if req.UsesRemaining != nil && holder[j].UsesRemaining != nil && !slices.Contains(from, j) {
				c.Uses = *req.UsesRemaining
				from = append(from, j)
			}
			out = append(out, c)
		}
		// The uses move once the whole request is covered, so that its rights
		// read the same counts.
		for _, j := range from {
			if left == nil {
				left = make(map[int]int)
			}
			left[j] = usesLeft(holder, j, left) - *req.UsesRemaining
		}
	}
	return out, nil
}

// usesLeft is what one-shot holder[j] has left, given left.
func usesLeft(holder []Grant, j int, left map[int]int) int {
	if n, ok := left[j]; ok {
		return n
	}
	return *holder[j].UsesRemaining
}

// overlapRule returns why a deny or ask of the holder keeps it from handing
// down right on req, or "" when none does.
func overlapRule(holder []Grant, req Grant, right Right) string {
	for _, h := range holder {
		if h.effectiveEffect() == Deny && h.Has(right) && overlaps(h.Resource, req.Resource) {
			return fmt.Sprintf("the holder is denied it on %s by grant %s", h.Resource, h.ID)
		}
		if h.effectiveEffect() == Ask && req.Effect != Ask && h.Has(right) && overlaps(h.Resource, req.Resource) {
			return fmt.Sprintf("the holder must ask for it on %s (grant %s); hand down an ask grant", h.Resource, h.ID)
		}
	}
	return ""
}

// coverOf returns the index of the holder grant that covers right on req
// (see Covers), or why none does.
func coverOf(holder []Grant, req Grant, right Right, left map[int]int) (int, string) {
	fit, best, bestUses, bestID := -1, -1, -1, ""
	var notDelegable, expiresTooLate string
	for j, h := range holder {
		eff := h.effectiveEffect()
		// An inherited ask only narrows an allow of the holder's own.
		asks := eff == Ask && req.Effect == Ask && !h.Inherited()
		if (eff != Allow && !asks) || !h.Has(right) || !h.usable() || !covers(h.Resource, req.Resource) {
			continue
		}
		if !h.CanDelegate() {
			notDelegable = h.ID
			continue
		}
		if h.ExpiresAt != nil && (req.ExpiresAt == nil || req.ExpiresAt.After(*h.ExpiresAt)) {
			expiresTooLate = h.ID
			continue
		}
		if h.UsesRemaining == nil {
			return j, ""
		}
		n := usesLeft(holder, j, left)
		if fit < 0 && req.UsesRemaining != nil && n >= *req.UsesRemaining {
			fit = j
		}
		if n > bestUses {
			best, bestUses, bestID = j, n, h.ID
		}
	}
	switch {
	case fit >= 0:
		return fit, ""
	case best < 0 && expiresTooLate != "":
		return -1, fmt.Sprintf("the holder's grant %s expires; a grant handed down must expire no later", expiresTooLate)
	case best < 0 && notDelegable != "":
		return -1, fmt.Sprintf("the holder's grant %s is not delegable", notDelegable)
	case best < 0:
		return -1, fmt.Sprintf("no usable grant of the holder covers %s", req.Resource)
	case req.UsesRemaining == nil:
		return -1, fmt.Sprintf("the holder has it only from one-shot grant %s (%s remaining); request a one-shot with at most %s", bestID, plural(bestUses, "use"), plural(bestUses, "use"))
	case bestUses < *holder[best].UsesRemaining:
		return -1, fmt.Sprintf("requests %s but the holder's one-shot grant %s has %d remaining once the grants requested before it take theirs: uses move to the receiver, they are not copied",
			plural(*req.UsesRemaining, "use"), bestID, bestUses)
	}
	return -1, fmt.Sprintf("requests %s but the holder's one-shot grant %s has %d remaining", plural(*req.UsesRemaining, "use"), bestID, bestUses)
}

// TakeUses moves the uses covers say (see Cover.Uses) out of the holder's
// one-shot grants, in one step: a receiver's uses are the holder's no
// more, so a holder with one use cannot give each of many receivers one.
// covers are what Covers returned for requested on holder. A holder grant
// with fewer uses left than its covers take refuses the whole with a
// *WideningError naming the request and uses_remaining. holder is returned
// as it is when nothing moves; otherwise the result is a deep copy.
func TakeUses(holder, requested []Grant, covers []Cover) ([]Grant, error) {
	var out []Grant
	for _, c := range covers {
		if c.Uses <= 0 {
			continue
		}
		if out == nil {
			out = CloneGrants(holder)
		}
		j := grantIndex(out, c.GrantID)
		if j < 0 {
			return nil, fmt.Errorf("take the uses of requested[%d] from grant %q: %w", c.Index, c.GrantID, ErrUnknownGrant)
		}
		n := out[j].UsesRemaining
		if n == nil || out[j].effectiveEffect() != Allow {
			return nil, fmt.Errorf("take the uses of requested[%d] from grant %q: %w: it is no longer a one-shot allow grant", c.Index, c.GrantID, ErrStaleDecision)
		}
		if *n < c.Uses {
			req := requested[c.Index]
			return nil, &WideningError{Index: c.Index, GrantID: req.ID, Resource: req.Resource, Right: c.Right,
				Rule: fmt.Sprintf("field uses_remaining: hands down %s of the holder's one-shot grant %s, which has %d left: uses move to the receiver, they are not copied",
					plural(c.Uses, "use"), c.GrantID, *n)}
		}
		*n -= c.Uses
	}
	if out == nil {
		return holder, nil
	}
	return out, nil
}

// InheritedDenyPrefix starts the id of every grant InheritedDenies returns,
// and so marks it inherited (Grant.Inherited). The mark is in the id so that
// it is kept wherever a grant is stored, by records and checkpoints written
// before it meant anything too.
const InheritedDenyPrefix = "inherited:"

// InheritedDenies returns copies of the holder's deny and ask grants (grants
// with an unknown effect count as denies), marked inherited. Appended to the
// grants a holder hands down, they make sure the receiver is never allowed
// anything the holder is denied, nor without asking anything the holder must
// ask for, whatever names the target answers to. They give nothing: an
// inherited ask only makes an ask of what an allow of the receiver's own
// allows (Check).
//
// A grant the holder inherited keeps its id; one of its own is named
// InheritedDenyPrefix+id. Either takes a "~N" suffix where its id is taken
// or too long: the receiver's grant ids must stay unique and valid however
// deep the tree. A rule the holder has twice (its own grant and the same one
// inherited) is returned once, as the inherited copy.
func InheritedDenies(holder []Grant) []Grant {
	type candidate struct {
		g               Grant
		inherited, keep bool
	}
	var cands []candidate
	for _, h := range holder {
		eff := h.effectiveEffect()
		if eff != Deny && eff != Ask {
			continue
		}
		g := h.Clone()
		g.Effect = eff
		g.UsesRemaining, g.Delegable = nil, nil
		if eff == Deny {
			g.ExpiresAt = nil
		}
		cands = append(cands, candidate{g: g, inherited: h.Inherited()})
	}
	// Inherited copies claim their rules (and ids) first.
	for _, inherited := range []bool{true, false} {
		for i := range cands {
			c := &cands[i]
			if c.inherited == inherited && !slices.ContainsFunc(cands, func(o candidate) bool { return o.keep && sameRule(o.g, c.g) }) {
				c.keep = true
			}
		}
	}
	taken := make(map[string]bool)
	var repeated []int
	for i, c := range cands {
		if c.keep && c.inherited {
			if taken[c.g.ID] {
				repeated = append(repeated, i) // a fork's grants may repeat an inherited id
			}
			taken[c.g.ID] = true
		}
	}
	for _, i := range repeated {
		cands[i].g.ID = uniqueID(cands[i].g.ID, taken)
	}
	var out []Grant
	for _, c := range cands {
		if !c.keep {
			continue
		}
		if !c.inherited {
			c.g.ID = uniqueID(InheritedDenyPrefix+c.g.ID, taken)
		}
		out = append(out, c.g)
	}
	return out
}

// sameRule reports whether a and b deny or ask for the same thing.
func sameRule(a, b Grant) bool {
	return a.Resource == b.Resource && a.Effect == b.Effect && len(a.Rights) == len(b.Rights) &&
		!slices.ContainsFunc(a.Rights, func(r Right) bool { return !b.Has(r) }) &&
		(a.ExpiresAt == nil) == (b.ExpiresAt == nil) && (a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt))
}

// WithUniqueIDs returns grants with each id that an earlier grant already
// took given a "~N" suffix, as InheritedDenies names its own: a list put
// together from two sources (a fork's grants and its caller's inherited
// ones) stays a valid grant list. An empty id is left as it is.
func WithUniqueIDs(grants []Grant) []Grant {
	taken := make(map[string]bool, len(grants))
	out := CloneGrants(grants)
	for i := range out {
		if out[i].ID == "" {
			continue
		}
		if taken[out[i].ID] {
			out[i].ID = uniqueID(out[i].ID, taken)
			continue
		}
		taken[out[i].ID] = true
	}
	return out
}

// uniqueID is name, or name with "~2", "~3"... (cut to fit maxGrantIDLen),
// the first not taken; it takes it.
func uniqueID(name string, taken map[string]bool) string {
	stem := name
	for n := 2; len(name) > maxGrantIDLen || taken[name]; n++ {
		suffix := "~" + strconv.Itoa(n)
		name = cutID(stem, maxGrantIDLen-len(suffix)) + suffix
	}
	taken[name] = true
	return name
}

// cutID cuts s to at most n bytes, at a character's start.
func cutID(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
