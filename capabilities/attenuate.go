package capabilities

import (
	"errors"
	"fmt"
	"strings"
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
//     be one-shot with no more uses than the best of them has remaining.
//
// Handing a one-shot down does not consume the holder's uses.
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
	for i, req := range requested {
		if req.ID != "" {
			if err := validateGrantID(req.ID); err != nil {
				return fmt.Errorf("requested[%d]: %w", i, err)
			}
		}
		if err := validateGrantBody(req); err != nil {
			return fmt.Errorf("requested[%d]: %w", i, err)
		}
		if req.Effect == Deny {
			continue
		}
		// An ask grant handed down is covered by what covers an allow, or by
		// an ask of the holder: it narrows either.

		for _, right := range req.Rights {
			if rule := coverRule(holder, req, right); rule != "" {
				return &WideningError{Index: i, GrantID: req.ID, Resource: req.Resource, Right: right, Rule: rule}
			}
		}
	}
	return nil
}

// coverRule returns why holder does not cover right on req, or "" when it does.
func coverRule(holder []Grant, req Grant, right Right) string {
	for _, h := range holder {
		if h.effectiveEffect() == Deny && h.Has(right) && overlaps(h.Resource, req.Resource) {
			return fmt.Sprintf("the holder is denied it on %s by grant %s", h.Resource, h.ID)
		}
		if h.effectiveEffect() == Ask && req.Effect != Ask && h.Has(right) && overlaps(h.Resource, req.Resource) {
			return fmt.Sprintf("the holder must ask for it on %s (grant %s); hand down an ask grant", h.Resource, h.ID)
		}
	}
	bestOneShot, bestID := -1, ""
	var notDelegable, expiresTooLate string
	for _, h := range holder {
		eff := h.effectiveEffect()
		if (eff != Allow && !(eff == Ask && req.Effect == Ask)) || !h.Has(right) || !h.usable() || !covers(h.Resource, req.Resource) {
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
			return ""
		}
		if *h.UsesRemaining > bestOneShot {
			bestOneShot, bestID = *h.UsesRemaining, h.ID
		}
	}
	switch {
	case bestOneShot < 0 && expiresTooLate != "":
		return fmt.Sprintf("the holder's grant %s expires; a grant handed down must expire no later", expiresTooLate)
	case bestOneShot < 0 && notDelegable != "":
		return fmt.Sprintf("the holder's grant %s is not delegable", notDelegable)
	case bestOneShot < 0:
		return fmt.Sprintf("no usable grant of the holder covers %s", req.Resource)
	case req.UsesRemaining == nil:
		return fmt.Sprintf("the holder has it only from one-shot grant %s (%s remaining); request a one-shot with at most %s", bestID, plural(bestOneShot, "use"), plural(bestOneShot, "use"))
	case *req.UsesRemaining > bestOneShot:
		return fmt.Sprintf("requests %s but the holder's one-shot grant %s has %d remaining", plural(*req.UsesRemaining, "use"), bestID, bestOneShot)
	}
	return ""
}

// InheritedDenyPrefix starts the id of every grant InheritedDenies returns.
const InheritedDenyPrefix = "inherited:"

// InheritedDenies returns copies of the holder's deny and ask grants (grants
// with an unknown effect count as denies), with ids prefixed by
// InheritedDenyPrefix (once: a grant inherited again keeps its id).
// Appended to the grants a holder hands down, they make sure the receiver is
// never allowed anything the holder is denied, nor without asking anything
// the holder must ask for, whatever names the target answers to.
func InheritedDenies(holder []Grant) []Grant {
	var out []Grant
	for _, h := range holder {
		eff := h.effectiveEffect()
		if eff != Deny && eff != Ask {
			continue
		}
		g := h.Clone()
		if !strings.HasPrefix(h.ID, InheritedDenyPrefix) {
			g.ID = InheritedDenyPrefix + h.ID
		}
		g.Effect = eff
		g.UsesRemaining, g.Delegable = nil, nil
		if eff == Deny {
			g.ExpiresAt = nil
		}
		out = append(out, g)
	}
	return out
}
