package skillpkg

import (
	"fmt"
	"strings"
)

// TemplatePart is one piece of a cli-tool argument template: exactly one of
// Literal, Input or Env is meaningful. A part with Input == "" and Env == ""
// is literal text (possibly empty).
type TemplatePart struct {
	Literal string
	// Input names the input whose value replaces {{name}}.
	Input string
	// Raw is the placeholder as written ("{{ name }}"): an input placeholder
	// that matches no supplied input renders as this text, as in runx.
	Raw string
	// Env names the declared variable whose value replaces {{env.NAME}}.
	Env string
}

// ParseTemplate splits an argument template into literal text and
// placeholders. A placeholder is {{name}} for an input or {{env.NAME}} for a
// declared environment variable; spaces just inside the braces are ignored.
// An empty placeholder or a malformed variable name is an error. Text
// outside placeholders, including a lone "}}" and an unclosed "{{", is
// literal, as runx leaves it.
func ParseTemplate(s string) ([]TemplatePart, error) {
	var parts []TemplatePart
	rest := s
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			if rest != "" || len(parts) == 0 {
				parts = append(parts, TemplatePart{Literal: rest})
			}
			return parts, nil
		}
		if open > 0 {
			parts = append(parts, TemplatePart{Literal: rest[:open]})
		}
		end := strings.Index(rest[open+2:], "}}")
		if end < 0 {
			parts = append(parts, TemplatePart{Literal: rest[open:]})
			return parts, nil
		}
		inner := strings.TrimSpace(rest[open+2 : open+2+end])
		switch {
		case inner == "":
			return nil, fmt.Errorf("placeholder at byte %d is empty", len(s)-len(rest)+open)
		case strings.Contains(inner, "{{"):
			return nil, fmt.Errorf("placeholder at byte %d contains a nested {{", len(s)-len(rest)+open)
		case strings.HasPrefix(inner, "env."):
			name := strings.TrimPrefix(inner, "env.")
			if !envNamePattern().MatchString(name) {
				return nil, fmt.Errorf("placeholder {{%s}} must name a variable of letters, digits and '_'", inner)
			}
			parts = append(parts, TemplatePart{Env: name})
		default:
			parts = append(parts, TemplatePart{Input: inner, Raw: rest[open : open+2+end+2]})
		}
		rest = rest[open+2+end+2:]
	}
}
