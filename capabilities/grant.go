package capabilities

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Right is one kind of access to a resource.
type Right string

// The rights a grant can carry. No right implies another.
const (
	Read        Right = "read"
	Write       Right = "write"
	Materialize Right = "materialize"
	Execute     Right = "execute"
	Admin       Right = "admin"
)

// AllRights lists every right in its canonical order.
var AllRights = []Right{Read, Write, Materialize, Execute, Admin}

// Valid reports whether r is one of AllRights.
func (r Right) Valid() bool {
	switch r {
	case Read, Write, Materialize, Execute, Admin:
		return true
	}
	return false
}

// Effect says whether a grant gives or takes away its rights.
type Effect string

// The effects. Deny beats ask, and ask beats allow, wherever they apply: a
// call covered by an ask grant waits for a Human's approval even where an
// allow grant covers it too.
const (
	Allow Effect = "allow"
	Deny  Effect = "deny"
	Ask   Effect = "ask"
)

// Sentinel errors a caller may need to tell apart.
var (
	// ErrInvalidRight is wrapped by errors about an unknown or malformed right.
	ErrInvalidRight = errors.New("invalid right")
	// ErrInvalidGrant is wrapped by every error ValidateGrant and ValidateGrants return.
	ErrInvalidGrant = errors.New("invalid grant")
)

// maxGrantIDLen bounds grant identifiers.
const maxGrantIDLen = 128

// Grant gives (or denies) Rights on a resource. The zero Effect decodes as
// Allow. UsesRemaining nil means unlimited; a non-nil count makes the grant
// one-shot: each use is reserved with Reserve and at zero the grant no longer
// allows anything.
type Grant struct {
	ID            string  `json:"id"`
	Resource      string  `json:"resource"`
	Rights        []Right `json:"rights"`
	Effect        Effect  `json:"effect"`
	UsesRemaining *int    `json:"uses_remaining,omitempty"`
	// ExpiresAt, when set, ends an allow or ask grant at that time on the
	// runtime's clock (Live drops it); deny grants never expire.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Delegable false means the holder cannot hand the grant (or anything it
	// covers) to a child; nil means it can.
	Delegable *bool `json:"delegable,omitempty"`
}

// Inherited reports whether g is a copy of an ancestor's deny or ask
// (InheritedDenies), by its id. An inherited ask only narrows: see Check.
func (g Grant) Inherited() bool { return strings.HasPrefix(g.ID, InheritedDenyPrefix) }

// CanDelegate reports whether the holder may hand g down.
func (g Grant) CanDelegate() bool { return g.Delegable == nil || *g.Delegable }

// Expired reports whether g has expired at now.
func (g Grant) Expired(now time.Time) bool { return g.ExpiresAt != nil && !now.Before(*g.ExpiresAt) }

// Live returns the grants in force at now: every grant but expired allow and
// ask grants. Decide with Check on Live(grants, now); one-shot reservations
// name grants by id, so they apply to the full list.
func Live(grants []Grant, now time.Time) []Grant {
	expired := func(g Grant) bool { return g.effectiveEffect() != Deny && g.Expired(now) }
	if !slices.ContainsFunc(grants, expired) {
		return grants // the common case, on every authority check: no copy
	}
	out := make([]Grant, 0, len(grants))
	for _, g := range grants {
		if !expired(g) {
			out = append(out, g)
		}
	}
	return out
}

// UnmarshalJSON decodes a grant, reading a missing or empty effect as Allow.
func (g *Grant) UnmarshalJSON(data []byte) error {
	type plain Grant
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	if p.Effect == "" {
		p.Effect = Allow
	}
	*g = Grant(p)
	return nil
}

// OneShot reports whether the grant has a use count.
func (g Grant) OneShot() bool { return g.UsesRemaining != nil }

// Has reports whether the grant lists right.
func (g Grant) Has(right Right) bool {
	for _, r := range g.Rights {
		if r == right {
			return true
		}
	}
	return false
}

// effectiveEffect reads the empty effect as Allow and anything unknown as Deny,
// so a corrupt grant can only take authority away.
func (g Grant) effectiveEffect() Effect {
	switch g.Effect {
	case Allow, "":
		return Allow
	case Ask:
		return Ask
	default:
		return Deny
	}
}

// usable reports whether an allow grant can still be used (not exhausted).
func (g Grant) usable() bool { return g.UsesRemaining == nil || *g.UsesRemaining > 0 }

// Clone returns a deep copy of g.
func (g Grant) Clone() Grant {
	c := g
	c.Rights = slices.Clone(g.Rights)
	if g.UsesRemaining != nil {
		n := *g.UsesRemaining
		c.UsesRemaining = &n
	}
	if g.ExpiresAt != nil {
		t := *g.ExpiresAt
		c.ExpiresAt = &t
	}
	if g.Delegable != nil {
		d := *g.Delegable
		c.Delegable = &d
	}
	return c
}

// CloneGrants returns a deep copy of grants (nil stays nil).
func CloneGrants(grants []Grant) []Grant {
	if grants == nil {
		return nil
	}
	out := make([]Grant, len(grants))
	for i, g := range grants {
		out[i] = g.Clone()
	}
	return out
}

// Uses returns a pointer to n, for building one-shot grants.
func Uses(n int) *int { return &n }

// ParseRights parses a comma-separated list such as "read,write". Spaces
// around names are ignored; an empty list, an empty element, an unknown right
// or a repeated right is an error that names it.
func ParseRights(s string) ([]Right, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: rights list %q is empty; want a comma-separated list of %s", ErrInvalidRight, s, rightNames())
	}
	parts := strings.Split(s, ",")
	rights := make([]Right, 0, len(parts))
	for i, p := range parts {
		r := Right(strings.TrimSpace(p))
		if r == "" {
			return nil, fmt.Errorf("%w: element %d of rights list %q is empty", ErrInvalidRight, i, s)
		}
		if !r.Valid() {
			return nil, fmt.Errorf("%w %q: want one of %s", ErrInvalidRight, r, rightNames())
		}
		for _, seen := range rights {
			if seen == r {
				return nil, fmt.Errorf("%w %q: listed twice in %q", ErrInvalidRight, r, s)
			}
		}
		rights = append(rights, r)
	}
	return rights, nil
}

// ParseGrantSpec parses "RESOURCE=RIGHTS[@USES][~DURATION]" (as given to
// --grant, --ask and --deny; @USES makes a one-shot grant with that many
// uses, ~DURATION one that expires that long after now, e.g.
// clock:sleep=read~10m) into a grant with the given id and effect. The
// resource is everything before the last '=' and is validated.
func ParseGrantSpec(id, spec string, effect Effect, now time.Time) (Grant, error) {
	i := strings.LastIndexByte(spec, '=')
	if i < 0 {
		return Grant{}, fmt.Errorf("%w %q: want RESOURCE=RIGHTS[@USES][~DURATION], e.g. clock:now=read, clock:sleep=read@1 or clock:sleep=read~10m", ErrInvalidGrant, spec)
	}
	rest, ttlPart, expires := strings.Cut(spec[i+1:], "~")
	var expiresAt *time.Time
	if expires {
		ttl, err := time.ParseDuration(ttlPart)
		if err != nil || ttl <= 0 {
			return Grant{}, fmt.Errorf("%w %q: ~DURATION must be a positive duration such as 30s, 10m or 2h", ErrInvalidGrant, spec)
		}
		t := now.Add(ttl)
		expiresAt = &t
	}
	rightsPart, usesPart, oneShot := strings.Cut(rest, "@")
	rights, err := ParseRights(rightsPart)
	if err != nil {
		return Grant{}, fmt.Errorf("grant %q: %w", spec, err)
	}
	g := Grant{ID: id, Resource: spec[:i], Rights: rights, Effect: effect, ExpiresAt: expiresAt}
	if oneShot {
		n, err := strconv.Atoi(usesPart)
		if err != nil || n < 1 {
			return Grant{}, fmt.Errorf("%w %q: @USES must be a positive whole number of uses", ErrInvalidGrant, spec)
		}
		g.UsesRemaining = Uses(n)
	}
	if err := ValidateGrant(g); err != nil {
		return Grant{}, err
	}
	return g, nil
}

func rightNames() string {
	names := make([]string, len(AllRights))
	for i, r := range AllRights {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// ValidateGrant checks one grant: a non-empty id of at most 128 printable
// characters without spaces, a valid resource, at least one right, no unknown
// or repeated right, effect allow or deny (empty reads as allow), and UsesRemaining (only on allow
// grants) not negative. The error names the grant and field and wraps
// ErrInvalidGrant.
func ValidateGrant(g Grant) error {
	if err := validateGrantID(g.ID); err != nil {
		return err
	}
	return validateGrantBody(g)
}

func validateGrantID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: field id: must not be empty", ErrInvalidGrant)
	}
	if len(id) > maxGrantIDLen {
		return fmt.Errorf("%w %q: field id: longer than %d bytes", ErrInvalidGrant, id, maxGrantIDLen)
	}
	for _, c := range id {
		if unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return fmt.Errorf("%w %q: field id: must be printable without spaces", ErrInvalidGrant, id)
		}
	}
	return nil
}

// validateGrantBody checks everything but the id, for grants a caller
// requests before the kernel names them.
func validateGrantBody(g Grant) error {
	if err := ValidateResource(g.Resource); err != nil {
		return fmt.Errorf("%w %q: field resource: %w", ErrInvalidGrant, g.ID, err)
	}
	if len(g.Rights) == 0 {
		return fmt.Errorf("%w %q: field rights: must list at least one of %s", ErrInvalidGrant, g.ID, rightNames())
	}
	for i, r := range g.Rights {
		if !r.Valid() {
			return fmt.Errorf("%w %q: field rights[%d]: %w %q: want one of %s", ErrInvalidGrant, g.ID, i, ErrInvalidRight, r, rightNames())
		}
		for _, prev := range g.Rights[:i] {
			if prev == r {
				return fmt.Errorf("%w %q: field rights[%d]: %q listed twice", ErrInvalidGrant, g.ID, i, r)
			}
		}
	}
	switch g.Effect {
	case Allow, "":
	case Deny, Ask:
		if g.UsesRemaining != nil {
			return fmt.Errorf("%w %q: field uses_remaining: only allow grants can be one-shot", ErrInvalidGrant, g.ID)
		}
		if g.Effect == Deny && g.ExpiresAt != nil {
			return fmt.Errorf("%w %q: field expires_at: a deny grant does not expire", ErrInvalidGrant, g.ID)
		}
	default:
		return fmt.Errorf("%w %q: field effect: %q must be %q, %q or %q", ErrInvalidGrant, g.ID, g.Effect, Allow, Ask, Deny)
	}
	if g.UsesRemaining != nil && *g.UsesRemaining < 0 {
		return fmt.Errorf("%w %q: field uses_remaining: %d must not be negative", ErrInvalidGrant, g.ID, *g.UsesRemaining)
	}
	return nil
}

// ValidateGrants validates every grant and checks that ids are unique.
func ValidateGrants(grants []Grant) error {
	seen := make(map[string]int, len(grants))
	for i, g := range grants {
		if err := ValidateGrant(g); err != nil {
			return fmt.Errorf("grants[%d]: %w", i, err)
		}
		if j, dup := seen[g.ID]; dup {
			return fmt.Errorf("grants[%d]: %w %q: field id: already used by grants[%d]", i, ErrInvalidGrant, g.ID, j)
		}
		seen[g.ID] = i
	}
	return nil
}
