package images

import (
	"strings"
	"testing"
)

func TestBuiltinBase(t *testing.T) {
	im, err := Builtin("base:v0")
	if err != nil {
		t.Fatal(err)
	}
	if im.Gated() || im.CompletionGate != GateOnePhase {
		t.Fatal("base:v0 exits in one phase")
	}
	if len(im.Tools) != 1 || im.Tools[0] != BuiltinTools {
		t.Fatalf("base:v0 shows every built-in tool, got %v", im.Tools)
	}
	if !im.Context.Object || im.Context.WindowTokens == 0 {
		t.Fatal("base:v0 keeps its context as an Object")
	}
	if _, err := Builtin("nope:v9"); err == nil || !strings.Contains(err.Error(), "base:v0") {
		t.Fatalf("unknown image error must list the built-ins, got %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	valid := "name: x\nversion: v1\nsystem_prompt: hi\ntools: [builtin]\n"
	if _, err := Parse("t", []byte(valid)); err != nil {
		t.Fatalf("valid image: %v", err)
	}
	cases := map[string]string{
		"name: X\nversion: v1\nsystem_prompt: hi\ntools: [builtin]\n":   "name:",
		"name: x\nversion: \"\"\nsystem_prompt: hi\ntools: [builtin]\n": "version:",
		"name: x\nversion: v1\ntools: [builtin]\n":                      "system_prompt: required",
		"name: x\nversion: v1\nsystem_prompt: hi\n":                     "tools: required",
		valid + "completion_gate: maybe\n":                              "completion_gate:",
		valid + "tool_projection: some\n":                               "tool_projection:",
		valid + "bogus: 1\n":                                            "field bogus not found",
		valid + "budget: {children: -1}\n":                              "budget.children",
		valid + "capabilities: [{resource: clock:now}]\n":               "capabilities[0].rights",
		"name: x\nversion: v1\nsystem_prompt: hi\ntools: [a, a]\n":      "listed twice",
		valid + "budget: {children: many}\n":                            "cannot unmarshal",
	}
	for in, want := range cases {
		_, err := Parse("t.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "t.yaml") {
			t.Errorf("%q: want error containing %q and the source, got %v", in, want, err)
		}
	}
}

func TestParseRef(t *testing.T) {
	if n, v, err := ParseRef("base:v0"); err != nil || n != "base" || v != "v0" {
		t.Fatalf("ParseRef: %s %s %v", n, v, err)
	}
	for _, bad := range []string{"base", ":v0", "base:", "Base:v0", "a:b:c"} {
		if _, _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) must fail", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("name: x\nversion: v1\nsystem_prompt: hi\ntools: [builtin]\n"))
	f.Add([]byte("name: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		im, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		if im.Name == "" || im.Version == "" || len(im.Tools) == 0 || im.CompletionGate == "" {
			t.Fatalf("accepted an image without required fields: %+v", im)
		}
	})
}

// A window that cannot hold one answer and a prompt is refused at parse
// time, before a process (or the compaction that divides by it) uses it.
func TestParseContextWindow(t *testing.T) {
	valid := "name: x\nversion: v1\nsystem_prompt: hi\ntools: [builtin]\n"
	cases := map[string]string{
		valid + "context: {window_tokens: 1}\n":                             "context.window_tokens: 1 must be at least max_output_tokens (0) plus 1024 tokens for the prompt",
		valid + "context: {window_tokens: 1000, max_output_tokens: 4096}\n": "context.max_output_tokens: 4096 must be less than window_tokens (1000)",
		valid + "context: {window_tokens: 4096, max_output_tokens: 4096}\n": "context.max_output_tokens: 4096 must be less than window_tokens (4096)",
		valid + "context: {window_tokens: 5000, max_output_tokens: 4096}\n": "context.window_tokens: 5000 must be at least max_output_tokens (4096) plus 1024",
		valid + "context: {max_output_tokens: 200000}\n":                    "context.max_output_tokens: 200000 must be less than window_tokens (128000)",
		valid + "context: {window_tokens: -1}\n":                            "context.window_tokens: -1 must be >= 0",
		valid + "context: {max_output_tokens: -1}\n":                        "context.max_output_tokens: -1 must be >= 0",
	}
	for in, want := range cases {
		_, err := Parse("t.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "t.yaml") {
			t.Errorf("%q: want error containing %q and the source, got %v", in, want, err)
		}
	}
	for _, ok := range []string{
		valid + "context: {window_tokens: 1024}\n",
		valid + "context: {window_tokens: 5120, max_output_tokens: 4096}\n",
	} {
		if _, err := Parse("t.yaml", []byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

func TestParseRefusesMalformedForms(t *testing.T) {
	valid := "name: x\nversion: v1\nsystem_prompt: hi\ntools: [builtin]\n"
	cases := map[string]string{
		valid + "budget: {tool_calls: 1.5}\n":                                       "budget.tool_calls: 1.5 must be a whole number",
		valid + "budget: {wall_seconds: 2.0}\n":                                     "budget.wall_seconds: 2.0 must be a whole number",
		valid + "context: {window_tokens: 2048.5}\n":                                "context.window_tokens: 2048.5 must be a whole number",
		valid + "max_turns_without_tool_call: 2.5\n":                                "max_turns_without_tool_call: 2.5 must be a whole number",
		valid + "---\nname: y\n":                                                    "only one YAML document is allowed (a second starts at line 5)",
		valid + "capabilities: [{resource: 'clock:nowx', rights: [read]}]\n":        "capabilities[0].resource: invalid resource \"clock:nowx\"",
		valid + "capabilities: [{resource: 'clock:now', rights: [reed]}]\n":         "capabilities[0].rights[0]: invalid right \"reed\"",
		valid + "capabilities: [{resource: 'clock:now', rights: [read, read]}]\n":   "capabilities[0].rights[1]: \"read\" listed twice",
		valid + "capabilities: [{resource: 'clock:now', rights: ['read,write']}]\n": "capabilities[0].rights[0]: invalid right \"read,write\": one right per element",
		valid + "max_turns_without_tool_call: -1\n":                                 "max_turns_without_tool_call: -1 must be >= 0",
		valid + "skills: ['', '']\n":                                                "skills[0]: empty skill name",
		valid + "skills: [a, a]\n":                                                  "skills[1]: \"a\" listed twice",
		"":                                                                          "the file is empty",
		"# only a comment\n":                                                        "the file is empty",
	}
	for in, want := range cases {
		_, err := Parse("t.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "t.yaml") {
			t.Errorf("%q: want error containing %q and the source, got %v", in, want, err)
		}
	}
	im, err := Parse("t.yaml", []byte(valid+"budget: {tool_calls: 3}\nskills: [a, b]\ncapabilities: [{resource: 'image:base:*', rights: [read, write]}]\n"))
	if err != nil || im.Budget.ToolCalls != 3 {
		t.Fatalf("valid image: %+v %v", im, err)
	}
}
