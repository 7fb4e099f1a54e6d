package skillpkg

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseSkillMarkdown(t *testing.T) {
	tests := []struct {
		name       string
		doc        string
		want       Skill
		wantManual string
		wantErr    string // substring; "" means success
		wantLine   int
	}{
		{
			name:       "all fields with allowed-tools as a string",
			doc:        "---\nname: pdf-tools\ndescription: Work with PDFs.\nallowed-tools: Read  Write\tfs.read\n---\n# Manual\n\nBody.\n",
			want:       Skill{Name: "pdf-tools", Description: "Work with PDFs.", AllowedTools: []string{"Read", "Write", "fs.read"}},
			wantManual: "# Manual\n\nBody.\n",
		},
		{
			name:       "allowed-tools as a list and CRLF line endings",
			doc:        "---\r\nname: x\r\nallowed-tools:\r\n  - a.b\r\n  - c\r\n---\r\nmanual\r\n",
			want:       Skill{Name: "x", AllowedTools: []string{"a.b", "c"}},
			wantManual: "manual\r\n",
		},
		{
			name:       "empty manual",
			doc:        "---\nname: x\n---",
			want:       Skill{Name: "x"},
			wantManual: "",
		},
		{
			name:       "a --- inside the manual stays in the manual",
			doc:        "---\nname: x\n---\nintro\n---\nmore\n",
			want:       Skill{Name: "x"},
			wantManual: "intro\n---\nmore\n",
		},
		{name: "no front matter", doc: "# Just markdown\n", wantErr: "must begin with a YAML front matter block"},
		{name: "unclosed front matter", doc: "---\nname: x\n", wantErr: "must begin with a YAML front matter block"},
		{name: "empty front matter", doc: "---\n---\n", wantErr: "name: is required", wantLine: 1},
		{name: "missing name", doc: "---\ndescription: d\n---\n", wantErr: "name: is required", wantLine: 2},
		{name: "name of the wrong type", doc: "---\nname: 12\n---\n", wantErr: "name: must be a string, got a number", wantLine: 2},
		{name: "name with a space", doc: "---\nname: my skill\n---\n", wantErr: "name: must be 1 to 64 letters"},
		{name: "name too long", doc: "---\nname: " + strings.Repeat("a", 65) + "\n---\n", wantErr: "name: must be 1 to 64 letters"},
		{name: "description null", doc: "---\nname: x\ndescription:\n---\n", wantErr: "description: must be a string, got null"},
		{name: "allowed-tools mapping", doc: "---\nname: x\nallowed-tools: {a: b}\n---\n", wantErr: "allowed-tools: must be a space-separated string or a list"},
		{name: "allowed-tools item with a space", doc: "---\nname: x\nallowed-tools: [\"a b\"]\n---\n", wantErr: "allowed-tools[0]: must not contain whitespace"},
		{name: "alias refused", doc: "---\nname: &n x\ndescription: *n\n---\n", wantErr: "anchors and aliases are not allowed"},
		{name: "duplicate key", doc: "---\nname: x\nname: y\n---\n", wantErr: "name: is given more than once", wantLine: 3},
		{name: "front matter is a list", doc: "---\n- a\n---\n", wantErr: "must be a mapping, got a list"},
		{name: "broken YAML", doc: "---\nname: [x\n---\n", wantErr: "must be well-formed YAML"},
		{name: "invalid UTF-8", doc: "---\nname: x\n---\n\xff", wantErr: "must be UTF-8 text"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, manual, err := ParseSkillMarkdown([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("want error containing %q, got %+v", tc.wantErr, got)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "SKILL.md") {
					t.Fatalf("error %q: want SKILL.md and %q", err, tc.wantErr)
				}
				if !errors.Is(err, ErrAdmission) {
					t.Fatalf("error %q does not match ErrAdmission", err)
				}
				var ae *AdmissionError
				if tc.wantLine != 0 && (!errors.As(err, &ae) || ae.Line != tc.wantLine) {
					t.Fatalf("error %q: want line %d", err, tc.wantLine)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("skill = %+v, want %+v", got, tc.want)
			}
			if manual != tc.wantManual {
				t.Fatalf("manual = %q, want %q", manual, tc.wantManual)
			}
		})
	}
}

func TestParseSkillMarkdownRefusesOversizedFile(t *testing.T) {
	doc := "---\nname: x\n---\n" + strings.Repeat("a", MaxManifestBytes)
	if _, _, err := ParseSkillMarkdown([]byte(doc)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("want size error, got %v", err)
	}
}

func FuzzParseSkillMarkdown(f *testing.F) {
	f.Add([]byte("---\nname: x\ndescription: d\nallowed-tools: a b\n---\nmanual\n"))
	f.Add([]byte("---\r\nname: x\r\nallowed-tools: [a, b]\r\n---\r\n"))
	f.Add([]byte("---\nname: &a x\n---\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("# nothing\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, manual, err := ParseSkillMarkdown(data)
		if err != nil {
			if !errors.Is(err, ErrAdmission) {
				t.Fatalf("error does not match ErrAdmission: %v", err)
			}
			if !strings.HasPrefix(err.Error(), SkillFile) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if !skillNamePattern().MatchString(s.Name) {
			t.Fatalf("admitted invalid name %q", s.Name)
		}
		for _, tool := range s.AllowedTools {
			if tool == "" || strings.ContainsAny(tool, " \t\r\n") {
				t.Fatalf("admitted allowed tool %q", tool)
			}
		}
		if !strings.HasSuffix(string(data), manual) {
			t.Fatalf("manual %q is not the tail of the document", manual)
		}
	})
}
