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
