package skillpkg

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sync"
	"unicode/utf8"
)

// SkillFile is the name of a package's manual.
const SkillFile = "SKILL.md"

// MaxManifestBytes caps SKILL.md, skill.yaml and each bundled tool manifest;
// these are hand-written documents and a larger one is refused unread.
const MaxManifestBytes = 1 << 20

// Skill is the front matter of a SKILL.md.
type Skill struct {
	// Name identifies the skill; required.
	Name string
	// Description tells a model when the skill applies.
	Description string
	// AllowedTools lists tool names, from a space-separated string or a list.
	AllowedTools []string
	// Metadata holds every other front matter key (runx:, registry_owner:,
	// links:, ...) as compact JSON. They are shown, never refused: the front
	// matter is the operator manual's header, and other tools own its keys.
	Metadata map[string]json.RawMessage
}

// Compiled on first use: compiling at package init taxes every libos start.
var skillNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

// ParseSkillMarkdown parses a SKILL.md: a YAML front matter block delimited by
// lines holding exactly "---", then the Markdown manual, which is returned
// verbatim. It does no I/O.
func ParseSkillMarkdown(data []byte) (Skill, string, error) {
	r := nodeReader{file: SkillFile}
	if len(data) > MaxManifestBytes {
		return Skill{}, "", r.fail(nil, "", "must be at most %d bytes", MaxManifestBytes)
	}
	if !utf8.Valid(data) {
		return Skill{}, "", r.fail(nil, "", "must be UTF-8 text")
	}
	front, manual, ok := splitFrontMatter(data)
	if !ok {
		return Skill{}, "", r.fail(nil, "", "must begin with a YAML front matter block between two lines holding exactly ---")
	}
	root, err := r.parseDocument(front)
	if err != nil {
		return Skill{}, "", shiftLine(err, 1)
	}
	if root == nil {
		return Skill{}, "", &AdmissionError{File: SkillFile, Line: 1, Field: "name", Rule: "is required"}
	}
	entries, err := r.mapping(root, "")
	if err != nil {
		return Skill{}, "", shiftLine(err, 1)
	}
	var s Skill
	haveName := false
	for _, e := range entries {
		switch e.key {
		case "name":
			s.Name, err = r.str(e.value, e.key)
			if err == nil && !skillNamePattern().MatchString(s.Name) {
				err = r.fail(e.value, e.key, "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
			}
			haveName = true
		case "description":
			s.Description, err = r.str(e.value, e.key)
		case "allowed-tools":
			s.AllowedTools, err = r.words(e.value, e.key)
		default:
			var raw json.RawMessage
			if raw, err = r.jsonValue(e.value, join("", e.key)); err == nil {
				if s.Metadata == nil {
					s.Metadata = map[string]json.RawMessage{}
				}
				s.Metadata[e.key] = raw
			}
		}
		if err != nil {
			return Skill{}, "", shiftLine(err, 1)
		}
	}
	if !haveName {
		return Skill{}, "", shiftLine(r.fail(root, "name", "is required"), 1)
	}
	return s, string(manual), nil
}

// splitFrontMatter separates the front matter from the manual. Both LF and
// CRLF line endings are accepted.
func splitFrontMatter(data []byte) (front, manual []byte, ok bool) {
	first, body, found := cutLine(data)
	if !found || string(first) != "---" {
		return nil, nil, false
	}
	offset := 0
	for {
		line, after, hasNewline := cutLine(body[offset:])
		if string(line) == "---" {
			return body[:offset], after, true
		}
		if !hasNewline {
			break
		}
		offset = len(body) - len(after)
	}
	return nil, nil, false
}

// cutLine returns the first line of data without its terminator.
func cutLine(data []byte) (line, rest []byte, found bool) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return bytes.TrimSuffix(data, []byte("\r")), nil, false
	}
	return bytes.TrimSuffix(data[:i], []byte("\r")), data[i+1:], true
}

// shiftLine moves an error's line number past the opening --- of the front
// matter so that it names the line in SKILL.md itself.
func shiftLine(err error, by int) error {
	if ae, ok := err.(*AdmissionError); ok && ae.Line > 0 {
		ae.Line += by
	}
	return err
}
