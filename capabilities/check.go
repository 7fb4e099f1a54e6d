package capabilities

import (
	"errors"
	"fmt"
	"strings"
)

// Errors Reserve returns.
var (
	// ErrNotAllowed: the decision passed to Reserve did not allow anything.
	ErrNotAllowed = errors.New("not allowed")
	// ErrUnknownGrant: the grant a decision or reservation names is not in the list.
	ErrUnknownGrant = errors.New("unknown grant")
	// ErrExhausted: the one-shot grant has no use left.
	ErrExhausted = errors.New("one-shot grant exhausted")
	// ErrStaleDecision: the grant changed since the decision was made (it is no
	// longer a one-shot allow grant); decide again.
	ErrStaleDecision = errors.New("stale decision")
)

// Decision is the outcome of Check.
type Decision struct {
	// Allowed is true when an allowing grant applies and no deny or ask does.
	Allowed bool
	// Ask is true when an ask grant applies and no deny does: the call waits
	// for a Human's approval (GrantID names the ask grant).
	Ask bool
	// GrantID is the allowing grant when Allowed, or the denying grant when a
	// deny decided; empty when no grant applied.
	GrantID string
	// OneShot is true when the allowing grant is one-shot: the caller must
	// Reserve a use before the effect.
	OneShot bool
	// Reason explains the decision for logs and for the model, e.g.
	// `no grant of "read" on clock:sleep` or `denied by grant g3`.
	Reason string
	// Right is the right that was checked.
	Right Right
	// Name is the target name the deciding grant matched; empty when none did.
	Name string
}

// Check decides whether grants allow right on a target. names lists the names
// the target answers to, most specific first: an Object answers to
// "object:<oid>" and then "object_namespace:<ns>" (see ObjectNames), so a right
// on the namespace covers every Object in it.
//
// A deny grant listing right on any of the names beats every other grant; an
// ask grant beats every allow (the Decision asks instead of allowing). An
// inherited ask (Grant.Inherited) only narrows: it asks for what an allow
// grant allows, and without one the decision is the allow grants' refusal,
// as if it were not there; the receiver of a hand-down holds exactly what
// it was handed. Nothing is allowed without an allow grant. Check does not
// look at expiry: decide on Live(grants, now). An exhausted one-shot
// (UsesRemaining == 0) does not count. Among several allowing grants an
// unlimited one is preferred, so that a one-shot is not consumed needlessly;
// otherwise the first by name order, then grant order. A grant with an
// unknown effect is treated as a deny.
//
// Check does not mutate grants and is safe for concurrent use on the same slice.
func Check(grants []Grant, right Right, names ...string) Decision {
	if !right.Valid() {
		return Decision{Right: right, Reason: fmt.Sprintf("%q is not a right; want one of %s", right, rightNames())}
	}
	if len(names) == 0 {
		return Decision{Right: right, Reason: "no resource named"}
	}
	for _, name := range names {
		for _, g := range grants {
			if g.effectiveEffect() == Deny && g.Has(right) && Matches(g.Resource, name) {
				return Decision{Right: right, Name: name, GrantID: g.ID, Reason: "denied by grant " + g.ID}
			}
		}
	}
	allow := checkAllow(grants, right, names)
	for _, name := range names {
		for _, g := range grants {
			if g.effectiveEffect() == Ask && g.Has(right) && Matches(g.Resource, name) && (allow.Allowed || !g.Inherited()) {
				return Decision{Ask: true, Right: right, Name: name, GrantID: g.ID, Reason: "needs a Human's approval: grant " + g.ID + " asks"}
			}
		}
	}
	return allow
}

// checkAllow is Check's decision by the allow grants alone.
func checkAllow(grants []Grant, right Right, names []string) Decision {
	oneShot, exhausted := -1, -1
	var oneShotName, exhaustedName string
	for _, name := range names {
		for i, g := range grants {
			if g.effectiveEffect() != Allow || !g.Has(right) || !Matches(g.Resource, name) {
				continue
			}
			switch {
			case g.UsesRemaining == nil:
				return Decision{Allowed: true, Right: right, Name: name, GrantID: g.ID, Reason: "allowed by grant " + g.ID}
			case *g.UsesRemaining > 0:
				if oneShot < 0 {
					oneShot, oneShotName = i, name
				}
			default:
				if exhausted < 0 {
					exhausted, exhaustedName = i, name
				}
			}
		}
	}
	if oneShot >= 0 {
		g := grants[oneShot]
		return Decision{
			Allowed: true, OneShot: true, Right: right, Name: oneShotName, GrantID: g.ID,
			Reason: fmt.Sprintf("allowed by one-shot grant %s (%s remaining)", g.ID, plural(*g.UsesRemaining, "use")),
		}
	}
	if exhausted >= 0 {
		g := grants[exhausted]
		return Decision{Right: right, Name: exhaustedName, Reason: fmt.Sprintf("one-shot grant %s of %q on %s has no uses remaining", g.ID, right, exhaustedName)}
	}
	return Decision{Right: right, Reason: fmt.Sprintf("no grant of %q on %s", right, strings.Join(names, " or "))}
}

// Reservation records one use taken from a one-shot grant, so that Restore can
// give back exactly that use. The zero Reservation (from an unlimited grant)
// restores nothing.
type Reservation struct {
	GrantID string `json:"grant_id,omitempty"`
	// Before is UsesRemaining when the use was taken.
	Before int `json:"before,omitempty"`
}

// Reserve consumes one use of the one-shot grant that d allowed by, and returns
// the new grant list with the reservation to pass to Restore. The input slice
// and its grants are not mutated; the result is a deep copy. A decision by an
// unlimited grant consumes nothing and returns the zero Reservation.
//
// Reserve with the grants the decision was made on; the kernel serialises
// Check, Reserve and the write of the new grants per process.
func Reserve(grants []Grant, d Decision) ([]Grant, Reservation, error) {
	if !d.Allowed {
		return nil, Reservation{}, fmt.Errorf("reserve a use: %w: %s", ErrNotAllowed, d.Reason)
	}
	if !d.OneShot {
		return CloneGrants(grants), Reservation{}, nil
	}
	i := grantIndex(grants, d.GrantID)
	if i < 0 {
		return nil, Reservation{}, fmt.Errorf("reserve a use of grant %q: %w", d.GrantID, ErrUnknownGrant)
	}
	g := grants[i]
	if g.effectiveEffect() != Allow || g.UsesRemaining == nil {
		return nil, Reservation{}, fmt.Errorf("reserve a use of grant %q: %w: it is no longer a one-shot allow grant", d.GrantID, ErrStaleDecision)
	}
	before := *g.UsesRemaining
	if before <= 0 {
		return nil, Reservation{}, fmt.Errorf("reserve a use of grant %q: %w", d.GrantID, ErrExhausted)
	}
	out := CloneGrants(grants)
	*out[i].UsesRemaining = before - 1
	return out, Reservation{GrantID: g.ID, Before: before}, nil
}

// Restore gives back the use r took, for an effect that certainly did not
// start. The count becomes min(current+1, r.Before): it never rises above what
// the grant had when the use was reserved, so even a repeated Restore of one
// reservation cannot give the grant more uses than it had then. A grant that is gone or no longer one-shot is left
// alone. The input is not mutated; the result is a deep copy.
func Restore(grants []Grant, r Reservation) []Grant {
	out := CloneGrants(grants)
	if r.GrantID == "" {
		return out
	}
	i := grantIndex(out, r.GrantID)
	if i < 0 || out[i].UsesRemaining == nil {
		return out
	}
	n := out[i].UsesRemaining
	*n = max(*n, min(*n+1, r.Before))
	return out
}

func grantIndex(grants []Grant, id string) int {
	for i, g := range grants {
		if g.ID == id {
			return i
		}
	}
	return -1
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Approved is the decision for a call a Human approved: ask grants allow it.
// A deny still refuses it. An inherited ask allows nothing itself: the
// approval lets through what the allow grants allow (see Check).
func Approved(grants []Grant, right Right, names ...string) Decision {
	asAllow := make([]Grant, 0, len(grants))
	for _, g := range grants {
		if g.effectiveEffect() == Ask {
			if g.Inherited() {
				continue
			}
			g = g.Clone()
			g.Effect = Allow
		}
		asAllow = append(asAllow, g)
	}
	return Check(asAllow, right, names...)
}
