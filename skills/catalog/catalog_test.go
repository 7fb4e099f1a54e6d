package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/skills/skillpkg"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

const runtimeSession = "agent-libos-runtime-session"

func skillNames(infos []tools.SkillInfo) []string {
	var out []string
	for _, s := range infos {
		out = append(out, s.Name)
	}
	return out
}

func toolNames(ts []*tools.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func skillInfo(t *testing.T, c *catalog.Catalog, name string) tools.SkillInfo {
	t.Helper()
	for _, s := range c.Skills() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no skill %q in %v", name, skillNames(c.Skills()))
	return tools.SkillInfo{}
}

func TestLoadCatalogFixtures(t *testing.T) {
	c := loadAgent(t)
	if got, want := skillNames(c.Skills()), []string{runtimeSession, "broken-delegate", "delegate", "echo", "tally"}; !slices.Equal(got, want) {
		t.Fatalf("skills %v, want %v", got, want)
	}
	if got, want := toolNames(c.Tools()), []string{"broken-delegate", "delegate", "echo", "echo_raw", "tally", "text_upper"}; !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	// A skill's tools are its own (default runner first as written, then the
	// others and bundled tools) plus what allowed-tools names.
	if got, want := skillInfo(t, c, "echo").Tools, []string{"echo", "echo_raw", "get_current_time"}; !slices.Equal(got, want) {
		t.Fatalf("echo tools %v, want %v", got, want)
	}
	if got, want := skillInfo(t, c, "tally").Tools, []string{"tally", "text_upper"}; !slices.Equal(got, want) {
		t.Fatalf("tally tools %v, want %v", got, want)
	}
	rs := skillInfo(t, c, runtimeSession)
	if got, want := rs.Tools, []string{"get_current_time", "sleep", "compact_process_context", "process_exit"}; !slices.Equal(got, want) {
		t.Fatalf("runtime-session tools %v, want %v", got, want)
	}
	if !strings.Contains(rs.Description, "time") {
		t.Fatalf("runtime-session description %q", rs.Description)
	}
	echoDir := skillInfo(t, c, "echo").Dir
	if want := filepath.Join(agentSkills(t), "echo"); echoDir != want {
		t.Fatalf("echo dir %s, want %s", echoDir, want)
	}
	// Scopes are the runner's, on every tool.
	if got := toolByName(t, c.Tools(), "echo").Scopes; !slices.Equal(got, []string{"echo.use"}) {
		t.Fatalf("echo scopes %v", got)
	}
	if got := toolByName(t, c.Tools(), "delegate").Scopes; !slices.Equal(got, []string{"delegate.run"}) {
		t.Fatalf("delegate scopes %v", got)
	}
	if got := toolByName(t, c.Tools(), "echo_raw").Scopes; len(got) != 0 {
		t.Fatalf("echo_raw scopes %v", got)
	}
	if !toolByName(t, c.Tools(), "delegate").EndsBatch || toolByName(t, c.Tools(), "echo").EndsBatch {
		t.Fatal("only the agent-task tool waits, so only it ends the batch")
	}
	// Skills and Tools hand out copies.
	c.Skills()[0].Tools[0] = "mutated"
	if c.Skills()[0].Tools[0] == "mutated" {
		t.Fatal("Skills must return a copy")
	}
	if ws := c.Workspace(); !filepath.IsAbs(ws) {
		t.Fatalf("workspace %q is not resolved", ws)
	}
}

func TestLoadCatalogFolderIsPackage(t *testing.T) {
	c, err := catalog.LoadCatalog([]string{filepath.Join(agentSkills(t), "echo")}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := skillNames(c.Skills()), []string{runtimeSession, "echo"}; !slices.Equal(got, want) {
		t.Fatalf("skills %v, want %v", got, want)
	}
	// The same package reached twice (as itself and through its parent) is
	// loaded once.
	c2, err := catalog.LoadCatalog([]string{filepath.Join(agentSkills(t), "echo"), agentSkills(t)}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if n := len(c2.Skills()); n != 5 {
		t.Fatalf("%d skills, want 5", n)
	}
	// Without folders only the built-in skills exist.
	c3, err := catalog.LoadCatalog(nil, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got := skillNames(c3.Skills()); !slices.Equal(got, []string{runtimeSession}) || len(c3.Tools()) != 0 {
		t.Fatalf("built-ins only: skills %v tools %v", got, toolNames(c3.Tools()))
	}
}

// writePackage writes a skill package folder under parent.
func writePackage(t *testing.T, parent, folder, skillMD, skillYAML string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(parent, folder)
	write := func(rel, body string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("SKILL.md", skillMD)
	if skillYAML != "" {
		write("skill.yaml", skillYAML)
	}
	for rel, body := range files {
		write(rel, body)
	}
	return dir
}

func skillMD(name string) string {
	return "---\nname: " + name + "\ndescription: test skill " + name + "\n---\n\n# " + name + "\n"
}

const catRunner = "type: cli-tool\n    command: cat\n    input_mode: stdin\n"

func TestToolNamesSanitizedAndTruncated(t *testing.T) {
	root := t.TempDir()
	long := strings.Repeat("x", 60)
	writePackage(t, root, "dotted", skillMD("my.skill"), "runners:\n  main:\n    default: true\n    "+catRunner+"  v2.fast:\n    "+catRunner, nil)
	writePackage(t, root, "long", skillMD(long), "runners:\n  main:\n    default: true\n    "+catRunner+"  second-runner:\n    "+catRunner, map[string]string{
		"tools/ns.x/t/manifest.json": "",
	})
	// The bundled tool folder above is not a valid tool namespace: refused.
	if _, err := catalog.LoadCatalog([]string{root}, testOptions(t)); err == nil || !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), filepath.Join(root, "long")) {
		t.Fatalf("bad bundled tool folder: want an admission error naming the package, got %v", err)
	}
	os.RemoveAll(filepath.Join(root, "long", "tools"))
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := []string{"my_skill", "my_skill_v2_fast", long, (long + "_second-runner")[:64]}
	slices.Sort(want)
	if got := toolNames(c.Tools()); !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
}

func TestLoadCatalogRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, root string) []string
		opts  func(*catalog.CatalogOptions)
		is    error
		parts []string
	}{
		{
			name: "javascript import that leaves the package",
			setup: func(t *testing.T, root string) []string {
				return []string{filepath.Join("..", "..", "testdata", "skills", "js", "escape-parent")}
			},
			is:    skillpkg.ErrModuleRefused,
			parts: []string{"skill package", `import "../../outside.mjs" from lib/util.mjs is refused`},
		},
		{
			name: "tool name collision between two skills",
			setup: func(t *testing.T, root string) []string {
				writePackage(t, root, "a", skillMD("a"), "runners:\n  main:\n    default: true\n    "+catRunner+"  b_c:\n    "+catRunner, nil)
				writePackage(t, root, "ab", skillMD("a_b"), "runners:\n  main:\n    default: true\n    "+catRunner+"  c:\n    "+catRunner, nil)
				return []string{root}
			},
			is:    catalog.ErrNameCollision,
			parts: []string{`"a_b_c"`, "skill a runner b_c", "skill a_b runner c"},
		},
		{
			name: "runner and bundled tool collide",
			setup: func(t *testing.T, root string) []string {
				writePackage(t, root, "ns", skillMD("ns"), "runners:\n  main:\n    default: true\n    "+catRunner+"  t:\n    "+catRunner, map[string]string{
					"tools/ns/t/manifest.json": `{"name": "ns.t", "runner": {"type": "cli-tool", "command": "cat"}}`,
				})
				return []string{root}
			},
			is:    catalog.ErrNameCollision,
			parts: []string{`"ns_t"`, "skill ns runner t", "skill ns bundled tool ns.t"},
		},
		{
			name: "collision with a reserved built-in name",
			setup: func(t *testing.T, root string) []string {
				writePackage(t, root, "sleep", skillMD("sleep"), "run:\n  "+strings.ReplaceAll(catRunner, "    ", "  "), nil)
				return []string{root}
			},
			opts:  func(o *catalog.CatalogOptions) { o.ReservedToolNames = []string{"get_current_time", "sleep"} },
			is:    catalog.ErrNameCollision,
			parts: []string{`"sleep"`, "the built-in tool sleep", "skill sleep runner default"},
		},
		{
			name: "two skills with one name",
			setup: func(t *testing.T, root string) []string {
				one := writePackage(t, filepath.Join(root, "one"), "x", skillMD("twin"), "", nil)
				two := writePackage(t, filepath.Join(root, "two"), "y", skillMD("twin"), "", nil)
				return []string{one, two}
			},
			is:    catalog.ErrNameCollision,
			parts: []string{`skill "twin"`, filepath.Join("one", "x"), filepath.Join("two", "y")},
		},
		{
			name: "a skill shadowing a built-in",
			setup: func(t *testing.T, root string) []string {
				return []string{writePackage(t, root, "rs", skillMD(runtimeSession), "", nil)}
			},
			is:    catalog.ErrNameCollision,
			parts: []string{runtimeSession, "built-in skill folder runtime-session"},
		},
		{
			name: "admission error names the package",
			setup: func(t *testing.T, root string) []string {
				writePackage(t, root, "good", skillMD("good"), "", nil)
				writePackage(t, root, "bad", skillMD("bad"), "run:\n  type: cli-tool\n  command: cat\n  colour: blue\n", nil)
				return []string{root}
			},
			is:    skillpkg.ErrAdmission,
			parts: []string{"skill package {root}" + string(filepath.Separator) + "bad:", "skill.yaml", "run.colour", "not a known runner field"},
		},
		{
			name: "folder without packages",
			setup: func(t *testing.T, root string) []string {
				os.MkdirAll(filepath.Join(root, "empty", "sub"), 0o755)
				return []string{filepath.Join(root, "empty")}
			},
			is:    catalog.ErrNoPackage,
			parts: []string{"dirs[0]", "SKILL.md"},
		},
		{
			name: "missing folder",
			setup: func(t *testing.T, root string) []string {
				return []string{filepath.Join(root, "nowhere")}
			},
			is:    os.ErrNotExist,
			parts: []string{"dirs[0]", "nowhere"},
		},
		{
			name: "scope pattern",
			setup: func(t *testing.T, root string) []string {
				return []string{writePackage(t, root, "p", skillMD("p"), "run:\n  type: cli-tool\n  command: cat\n  scopes: [\"net.*\"]\n", nil)}
			},
			is:    catalog.ErrInvalidPackage,
			parts: []string{"runners.default.scopes[0]", "net.*", "pattern"},
		},
		{
			name: "bad workspace",
			setup: func(t *testing.T, root string) []string {
				return nil
			},
			opts:  func(o *catalog.CatalogOptions) { o.Workspace = "/no/such/workspace" },
			is:    os.ErrNotExist,
			parts: []string{"workspace"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dirs := tc.setup(t, root)
			opts := testOptions(t)
			if tc.opts != nil {
				tc.opts(&opts)
			}
			c, err := catalog.LoadCatalog(dirs, opts)
			if err == nil {
				c.Close()
				t.Fatal("LoadCatalog succeeded")
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("error %v does not match %v", err, tc.is)
			}
			for _, p := range tc.parts {
				p = strings.ReplaceAll(p, "{root}", root)
				if !strings.Contains(err.Error(), p) {
					t.Fatalf("error %q does not mention %q", err, p)
				}
			}
		})
	}
}

// canonical re-encodes JSON so that two equal documents compare equal.
func canonical(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestSchemasExact(t *testing.T) {
	c := loadAgent(t)
	want := map[string]string{
		"echo": `{"type":"object","additionalProperties":false,"required":["text"],"properties":{
			"text":{"type":"string","description":"What to echo."},
			"times":{"type":"integer","description":"How many times.","default":1},
			"tags":{"type":"array","description":"Labels kept as given."},
			"extra":{"description":"Any JSON value."}}}`,
		"echo_raw": `{"type":"object"}`,
		"tally": `{"type":"object","additionalProperties":false,"required":["text"],"properties":{
			"text":{"type":"string","description":"The text to count."},
			"min_length":{"type":"integer","description":"Shortest word counted.","default":1}}}`,
		"text_upper": `{"type":"object","additionalProperties":false,"required":["text"],"properties":{"text":{"type":"string"}}}`,
		"delegate": `{"type":"object","additionalProperties":false,"required":["question"],"properties":{
			"question":{"type":"string","description":"The question for the child."}}}`,
		"broken-delegate": `{"type":"object"}`,
	}
	for name, w := range want {
		got, err := json.Marshal(toolByName(t, c.Tools(), name).Schema)
		if err != nil {
			t.Fatal(err)
		}
		if canonical(t, got) != canonical(t, []byte(w)) {
			t.Errorf("%s schema\n got %s\nwant %s", name, got, canonical(t, []byte(w)))
		}
	}

	// The schema is what arguments are validated against.
	echo := toolByName(t, c.Tools(), "echo").Schema
	for raw, field := range map[string]string{
		`{}`:                          "text: required",
		`{"text": 1}`:                 "text: must be a string",
		`{"text": "a", "times": 1.5}`: "times: must be an integer",
		`{"text": "a", "bogus": 1}`:   "bogus: unknown field",
		`{"text": "a", "tags": {}}`:   "tags: must be an array",
	} {
		_, err := echo.Normalize(json.RawMessage(raw))
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: want %q, got %v", raw, field, err)
		}
	}
	args, err := echo.Normalize(json.RawMessage(`{"text": "a", "extra": null}`))
	if err != nil || canonical(t, args) != `{"extra":null,"text":"a","times":1}` {
		t.Fatalf("defaults: %s %v", args, err)
	}
	// A runner without inputs takes any object, and only an object.
	raw := toolByName(t, c.Tools(), "echo_raw").Schema
	if _, err := raw.Normalize(json.RawMessage(`{"anything": [1, {"x": true}]}`)); err != nil {
		t.Fatalf("any object: %v", err)
	}
	if _, err := raw.Normalize(json.RawMessage(`[1]`)); err == nil {
		t.Fatal("an array is not an object")
	}
}

func TestInputSchemaKeepsDefaultsExact(t *testing.T) {
	r := &skillpkg.Runner{Inputs: []skillpkg.InputDecl{
		{Name: "big", Type: skillpkg.TypeInteger, Default: json.RawMessage(`9007199254740993`)},
		{Name: "obj", Type: skillpkg.TypeObject, Default: json.RawMessage(`{"a":[1,2.5]}`)},
		{Name: "need", Type: skillpkg.TypeBoolean, Required: true},
	}}
	s, params, err := catalog.InputSchema(r)
	if err != nil || params != nil {
		t.Fatal(err, string(params))
	}
	got, _ := json.Marshal(s)
	want := `{"type":"object","properties":{"big":{"type":"integer","default":9007199254740993},"need":{"type":"boolean"},"obj":{"type":"object","default":{"a":[1,2.5]}}},"required":["need"],"additionalProperties":false}`
	if string(got) != want {
		t.Fatalf("schema\n got %s\nwant %s", got, want)
	}
}
