package capabilities

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidResource is wrapped by every error ValidateResource returns.
var ErrInvalidResource = errors.New("invalid resource")

// Fixed resource names.
const (
	ClockNow           = "clock:now"
	ClockSleep         = "clock:sleep"
	ProcessSpawn       = "process:spawn"
	ContextMaintenance = "context:maintenance"
)

// maxResourceLen bounds a resource name so that grants stay small records.
const maxResourceLen = 512

// ImageResource names the image name:version, as in "image:base:v0".
func ImageResource(name, version string) string { return "image:" + name + ":" + version }

// ObjectResource names one Object by its OID.
func ObjectResource(oid string) string { return "object:" + oid }

// NamespaceResource names an Object namespace; a right on it covers every
// Object in the namespace.
func NamespaceResource(namespace string) string { return "object_namespace:" + namespace }

// CheckpointResource names the checkpoints of process pid.
func CheckpointResource(pid int64) string {
	return "checkpoint:process:" + strconv.FormatInt(pid, 10)
}

// ScopeResource names a permission scope a skill runner declares:
// scope:<ScopeName(scope)>.
func ScopeResource(scope string) string { return "scope:" + ScopeName(scope) }

// ScopeName is the part of a scope's resource after "scope:". A scope is an
// opaque exact string, which may hold spaces; a resource name may not, so
// whitespace, control characters and '%' are percent-encoded (as their
// UTF-8 bytes), and any other scope is its name unchanged. The encoding is
// one-to-one, so a grant never allows a scope it does not name.
func ScopeName(scope string) string {
	if !strings.ContainsFunc(scope, scopeEscaped) {
		return scope
	}
	var b strings.Builder
	for _, c := range scope {
		if !scopeEscaped(c) {
			b.WriteRune(c)
			continue
		}
		var buf [utf8.UTFMax]byte
		for _, x := range buf[:utf8.EncodeRune(buf[:], c)] {
			fmt.Fprintf(&b, "%%%02X", x)
		}
	}
	return b.String()
}

func scopeEscaped(c rune) bool {
	return c == '%' || unicode.IsSpace(c) || unicode.IsControl(c)
}

// ObjectNames lists the names an Object answers to in Check, most specific
// first: the Object itself, then its namespace.
func ObjectNames(oid, namespace string) []string {
	return []string{ObjectResource(oid), NamespaceResource(namespace)}
}

// schemeRule validates the part of a resource after "<scheme>:". With prefix
// set, rest is the beginning of a pattern and only has to be the beginning of
// some valid resource. It returns the broken rule, or "" when rest is valid.
type schemeRule func(rest string, prefix bool) string

// schemeOrder lists the schemes in the order error messages show them.
var schemeOrder = []string{"clock", "process", "image", "object", "object_namespace", "context", "checkpoint", "scope"}

var schemeRules = map[string]schemeRule{
	"clock":            fixedRule("clock", "now", "sleep"),
	"process":          fixedRule("process", "spawn"),
	"context":          fixedRule("context", "maintenance"),
	"image":            imageRule,
	"object":           objectRule,
	"object_namespace": opaqueRule("object_namespace:<namespace>"),
	"checkpoint":       checkpointRule,
	"scope":            opaqueRule("scope:<name>"),
}

// ValidateResource checks that r is a resource name or a prefix pattern.
//
// Valid names are clock:now, clock:sleep, process:spawn, image:<name>:<version>,
// object:<oid> (a canonical UUID), object_namespace:<namespace>,
// context:maintenance, checkpoint:process:<pid> and scope:<name>. A pattern has
// '*' as its last character and nowhere else, and its prefix must begin some
// valid name ("object:*", "image:base:*", "*"). The error names the broken rule
// and wraps ErrInvalidResource.
func ValidateResource(r string) error {
	if msg := resourceRule(r); msg != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidResource, r, msg)
	}
	return nil
}

func resourceRule(r string) string {
	if r == "" {
		return "must not be empty"
	}
	if len(r) > maxResourceLen {
		return fmt.Sprintf("longer than %d bytes", maxResourceLen)
	}
	if !utf8.ValidString(r) {
		return "must be valid UTF-8"
	}
	body, prefix := r, false
	if i := strings.IndexByte(r, '*'); i >= 0 {
		if i != len(r)-1 {
			return "'*' may appear only as the last character (a prefix pattern)"
		}
		body, prefix = r[:i], true
	}
	for _, c := range body {
		if unicode.IsSpace(c) || unicode.IsControl(c) {
			return "must not contain spaces or control characters"
		}
	}
	scheme, rest, hasColon := strings.Cut(body, ":")
	if !hasColon {
		if prefix {
			for _, s := range schemeOrder {
				if strings.HasPrefix(s, scheme) {
					return ""
				}
			}
		}
		return "must start with a scheme, one of " + strings.Join(schemeOrder, ", ")
	}
	rule, ok := schemeRules[scheme]
	if !ok {
		return fmt.Sprintf("unknown scheme %q; want one of %s", scheme, strings.Join(schemeOrder, ", "))
	}
	return rule(rest, prefix)
}

func fixedRule(scheme string, values ...string) schemeRule {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = scheme + ":" + v
	}
	want := "must be " + strings.Join(names, " or ")
	return func(rest string, prefix bool) string {
		for _, v := range values {
			if rest == v || (prefix && strings.HasPrefix(v, rest)) {
				return ""
			}
		}
		return want
	}
}

func isIdentChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

func identChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}

func imageRule(rest string, prefix bool) string {
	const want = "must be image:<name>:<version> (letters, digits, '.', '_', '-')"
	name, version, hasVersion := strings.Cut(rest, ":")
	if !identChars(name) || !identChars(version) {
		return want
	}
	if prefix {
		return ""
	}
	if !hasVersion || name == "" || version == "" {
		return want
	}
	return ""
}

// uuidLayout marks where a canonical UUID has hyphens; every other position
// is a hex digit.
const uuidLayout = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"

func objectRule(rest string, prefix bool) string {
	// Lower case only: OIDs are stored so and resources compare exactly, so
	// a grant naming an OID in capitals would match nothing (a deny would
	// deny nothing).
	const want = "must be object:<oid> with the OID a canonical UUID (8-4-4-4-12 lower-case hex digits)"
	if len(rest) > len(uuidLayout) || (!prefix && len(rest) != len(uuidLayout)) {
		return want
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if uuidLayout[i] == '-' {
			if c != '-' {
				return want
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return want
		}
	}
	return ""
}

func opaqueRule(form string) schemeRule {
	return func(rest string, prefix bool) string {
		if rest == "" && !prefix {
			return "must be " + form + " with a non-empty name"
		}
		return ""
	}
}

func checkpointRule(rest string, prefix bool) string {
	const want = "must be checkpoint:process:<pid> with pid a positive decimal integer"
	const proc = "process:"
	if prefix && len(rest) <= len(proc) {
		if strings.HasPrefix(proc, rest) {
			return ""
		}
		return want
	}
	digits, ok := strings.CutPrefix(rest, proc)
	if !ok {
		return want
	}
	if prefix && digits == "" {
		return ""
	}
	if digits == "" || digits[0] == '0' {
		return want
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return want
		}
	}
	if _, err := strconv.ParseInt(digits, 10, 64); err != nil {
		return want
	}
	return ""
}

// IsPattern reports whether resource is a prefix pattern (ends with '*').
func IsPattern(resource string) bool { return strings.HasSuffix(resource, "*") }

// Matches reports whether the grant resource (an exact name or a prefix
// pattern) covers the name.
func Matches(resource, name string) bool {
	if p, ok := strings.CutSuffix(resource, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return resource == name
}

// covers reports whether the holder resource covers every name the requested
// resource covers: an exact request needs an equal or matching holder; a
// pattern request needs a holder pattern with an equal or shorter prefix.
func covers(holder, requested string) bool {
	if !IsPattern(requested) {
		return Matches(holder, requested)
	}
	hp, ok := strings.CutSuffix(holder, "*")
	return ok && strings.HasPrefix(strings.TrimSuffix(requested, "*"), hp)
}

// overlaps reports whether some name is covered by both resources.
func overlaps(a, b string) bool {
	ap, aPattern := strings.CutSuffix(a, "*")
	bp, bPattern := strings.CutSuffix(b, "*")
	switch {
	case aPattern && bPattern:
		return strings.HasPrefix(ap, bp) || strings.HasPrefix(bp, ap)
	case aPattern:
		return strings.HasPrefix(b, ap)
	case bPattern:
		return strings.HasPrefix(a, bp)
	default:
		return a == b
	}
}
