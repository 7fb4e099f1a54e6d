package catalog_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

func metaTool(t *testing.T, name string) *tools.Tool {
	t.Helper()
	return toolByName(t, catalog.MetaTools(tools.Config{}), name)
}

func TestMetaToolSchemas(t *testing.T) {
	want := map[string]string{
		"discover_skills": `{"type":"object","additionalProperties":false}`,
		"activate_skill": `{"type":"object","additionalProperties":false,"required":["name"],"properties":{
			"name":{"type":"string","minLength":1,"maxLength":64,"description":"The skill's name, as discover_skills lists it."}}}`,
		"unload_skill": `{"type":"object","additionalProperties":false,"required":["name"],"properties":{
			"name":{"type":"string","minLength":1,"maxLength":64,"description":"The skill's name, as discover_skills lists it."}}}`,
		"read_skill_resource": `{"type":"object","additionalProperties":false,"required":["name","path"],"properties":{
			"name":{"type":"string","minLength":1,"maxLength":64,"description":"The skill's name, as discover_skills lists it."},
			"path":{"type":"string","minLength":1,"maxLength":1024,"description":"Package-relative file path such as SKILL.md or docs/guide.md."}}}`,
	}
	ts := catalog.MetaTools(tools.Config{})
	if got := toolNames(ts); !slices.Equal(got, []string{"discover_skills", "activate_skill", "read_skill_resource", "unload_skill"}) {
		t.Fatalf("meta tools %v", got)
	}
	for _, tl := range ts {
		got, _ := json.Marshal(tl.Schema)
		if canonical(t, got) != canonical(t, []byte(want[tl.Name])) {
			t.Errorf("%s schema\n got %s\nwant %s", tl.Name, got, canonical(t, []byte(want[tl.Name])))
		}
		if tl.EndsBatch || tl.Resume != nil || len(tl.Scopes) != 0 {
			t.Errorf("%s: meta tools neither wait nor own scopes", tl.Name)
		}
	}
	// Errors name the field.
	if _, err := call(t, metaTool(t, "activate_skill"), &fakeSys{}, `{}`); err == nil || !strings.Contains(err.Error(), "name: required") {
		t.Fatalf("missing name: %v", err)
	}
	if _, err := call(t, metaTool(t, "read_skill_resource"), &fakeSys{}, `{"name": "echo", "path": ""}`); err == nil || !strings.Contains(err.Error(), "path: must be at least 1") {
		t.Fatalf("empty path: %v", err)
	}
}

func TestDiscoverActivateUnload(t *testing.T) {
	c := loadAgent(t)
	sys := &fakeSys{skills: c.Skills()}

	out, err := call(t, metaTool(t, "discover_skills"), sys, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	list := out.Result["skills"].([]map[string]any)
	if out.Result["count"] != 5 || len(list) != 5 || list[3]["name"] != "echo" || list[3]["active"] != false {
		t.Fatalf("discover: %v", out.Result)
	}
	if got := list[3]["tools"].([]string); !slices.Equal(got, []string{"echo", "echo_raw", "get_current_time"}) {
		t.Fatalf("echo tools %v", got)
	}

	out, err = call(t, metaTool(t, "activate_skill"), sys, `{"name": "echo"}`)
	if err != nil {
		t.Fatal(err)
	}
	manual := out.Result["manual"].(string)
	if !strings.HasPrefix(manual, "\n# echo\n") || strings.Contains(manual, "allowed-tools") {
		t.Fatalf("manual must be the Markdown after the front matter, got %q", manual)
	}
	if !slices.Equal(out.Result["tools"].([]string), []string{"echo", "echo_raw", "get_current_time"}) || !strings.Contains(out.Result["note"].(string), "grants nothing") {
		t.Fatalf("activate: %v", out.Result)
	}
	if !slices.Equal(sys.active, []string{"echo"}) || len(sys.authorized) != 0 {
		t.Fatalf("activation records the skill and checks no authority: active %v authorized %v", sys.active, sys.authorized)
	}

	// The built-in skill's manual comes from the embedded package.
	out, err = call(t, metaTool(t, "activate_skill"), sys, `{"name": "agent-libos-runtime-session"}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"## get_current_time", "## sleep", "## compact_process_context", "## process_exit", "completion_review_required", "grants nothing", "context_under_target"} {
		if !strings.Contains(out.Result["manual"].(string), part) && !strings.Contains(out.Result["note"].(string), part) {
			t.Errorf("runtime-session manual lacks %q", part)
		}
	}

	out, err = call(t, metaTool(t, "discover_skills"), sys, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Result["skills"].([]map[string]any) {
		wantActive := s["name"] == "echo" || s["name"] == runtimeSession
		if s["active"] != wantActive {
			t.Fatalf("%s active = %v", s["name"], s["active"])
		}
	}

	_, err = call(t, metaTool(t, "activate_skill"), sys, `{"name": "nope"}`)
	wantToolError(t, err, tools.CodeNotFound, "name:", "nope")

	if _, err := call(t, metaTool(t, "unload_skill"), sys, `{"name": "echo"}`); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(sys.active, "echo") {
		t.Fatal("unload left echo active")
	}
	_, err = call(t, metaTool(t, "unload_skill"), sys, `{"name": "echo"}`)
	wantToolError(t, err, tools.CodeNotFound, "name:", "not active")

	// Without a catalog nothing is discoverable.
	out, err = call(t, metaTool(t, "discover_skills"), &fakeSys{}, `{}`)
	if err != nil || out.Result["count"] != 0 {
		t.Fatalf("empty discover: %v %v", out.Result, err)
	}
}

// resourcePackage copies the echo fixture into a temporary folder and adds
// the files and links the containment cases need.
func resourcePackage(t *testing.T) (dir, outside string) {
	t.Helper()
	root := t.TempDir()
	outside = filepath.Join(root, "secret.txt")
	if err := os.WriteFile(outside, []byte("outside the package"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(agentSkills(t), "echo")
	dir = filepath.Join(root, "pkg", "echo")
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(dir, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(dir, "abs-link.txt")))
	must(os.Symlink("../../secret.txt", filepath.Join(dir, "rel-link.txt")))
	must(os.Symlink(filepath.Join("..", ".."), filepath.Join(dir, "docs", "up")))
	must(os.Symlink("docs/guide.md", filepath.Join(dir, "guide-link.md")))
	must(os.WriteFile(filepath.Join(dir, "binary.dat"), []byte{0xff, 0xfe, 0x00, 0x01}, 0o644))
	must(os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("a", catalog.MaxResourceBytes+1)), 0o644))
	must(os.WriteFile(filepath.Join(dir, "exact.txt"), []byte(strings.Repeat("é", catalog.MaxResourceBytes/2)), 0o644))
	return dir, outside
}

func TestReadSkillResourceContainment(t *testing.T) {
	dir, _ := resourcePackage(t)
	c, err := catalog.LoadCatalog([]string{dir}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sys := &fakeSys{skills: c.Skills()}
	read := metaTool(t, "read_skill_resource")
	ok := func(name, path, want string) {
		t.Helper()
		out, err := call(t, read, sys, `{"name": "`+name+`", "path": "`+path+`"}`)
		if err != nil {
			t.Fatalf("%s %s: %v", name, path, err)
		}
		text := out.Result["text"].(string)
		if !strings.Contains(text, want) || out.Result["bytes"] != len(text) || out.Result["path"] != path {
			t.Fatalf("%s %s: %v", name, path, out.Result)
		}
	}
	// Reading needs a discoverable skill, not an active one.
	ok("echo", "docs/guide.md", "writes its input object")
	ok("echo", "SKILL.md", "name: echo")
	ok("echo", "guide-link.md", "writes its input object") // a link that stays inside
	ok("echo", "exact.txt", "é")                           // exactly at the limit
	ok(runtimeSession, "SKILL.md", "allowed-tools: get_current_time sleep compact_process_context process_exit")

	refused := []struct{ path, code, part string }{
		{"../secret.txt", tools.CodeInvalidArguments, "'..' is not allowed"},
		{"docs/../../secret.txt", tools.CodeInvalidArguments, "'..' is not allowed"},
		{"docs/..", tools.CodeInvalidArguments, "'..' is not allowed"},
		{"/etc/passwd", tools.CodeInvalidArguments, "relative"},
		{"C:/x", tools.CodeInvalidArguments, "relative"},
		{`docs\\guide.md`, tools.CodeInvalidArguments, "'/'"},
		{"./SKILL.md", tools.CodeInvalidArguments, "clean relative"},
		{"docs//guide.md", tools.CodeInvalidArguments, "clean relative"},
		{"docs/", tools.CodeInvalidArguments, "clean relative"},
		{".", tools.CodeInvalidArguments, "clean relative"},
		{"abs-link.txt", tools.CodeDenied, "cannot be read inside the package"},
		{"rel-link.txt", tools.CodeDenied, "cannot be read inside the package"},
		{"docs/up/secret.txt", tools.CodeDenied, "cannot be read inside the package"},
		{"docs", tools.CodeInvalidArguments, "not a regular file"},
		{"binary.dat", tools.CodeInvalidArguments, "not UTF-8"},
		{"big.txt", tools.CodeInvalidArguments, "too large"},
		{"missing.md", tools.CodeNotFound, "does not exist"},
	}
	for _, r := range refused {
		out, err := call(t, read, sys, `{"name": "echo", "path": "`+r.path+`"}`)
		if err == nil {
			t.Errorf("%s: read %v", r.path, out.Result["text"])
			continue
		}
		te := tools.AsError(err)
		if te.Code != r.code || !strings.Contains(te.Message, r.part) || !strings.HasPrefix(te.Message, "path: ") {
			t.Errorf("%s: got %s %q, want %s mentioning %q and the field", r.path, te.Code, te.Message, r.code, r.part)
		}
		if strings.Contains(te.Message, "outside the package\"") {
			t.Errorf("%s: the outside file's content leaked", r.path)
		}
	}
	_, err = call(t, read, sys, `{"name": "ghost", "path": "SKILL.md"}`)
	wantToolError(t, err, tools.CodeNotFound, "name:", "ghost")
	// A skill the image may not discover is not readable.
	_, err = call(t, read, &fakeSys{}, `{"name": "echo", "path": "SKILL.md"}`)
	wantToolError(t, err, tools.CodeNotFound, "name:")
}

// discover_skills and activate_skill run inside a commit, so they show what
// admission read of SKILL.md and read no file; a caller changing the
// metadata it was given changes no other caller's.
func TestMetaToolsReadNoFileInTheirCommit(t *testing.T) {
	dir, _ := resourcePackage(t)
	md, err := os.ReadFile(filepath.Join(dir, "SKILL.md"))
	if err != nil {
		t.Fatal(err)
	}
	md = []byte(strings.Replace(string(md), "---\n", "---\nlinks: [\"https://example.com/echo\"]\n", 1))
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), md, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := catalog.LoadCatalog([]string{dir}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sys := &fakeSys{skills: c.Skills()}
	if err := os.Rename(filepath.Join(dir, "SKILL.md"), filepath.Join(dir, "SKILL.md.gone")); err != nil {
		t.Fatal(err)
	}
	out, err := call(t, metaTool(t, "activate_skill"), sys, `{"name": "echo"}`)
	if err != nil || !strings.HasPrefix(out.Result["manual"].(string), "\n# echo\n") {
		t.Fatalf("activation with SKILL.md gone from the disk: %v %v", out.Result, err)
	}
	if out, err = call(t, metaTool(t, "discover_skills"), sys, `{}`); err != nil {
		t.Fatal(err)
	}
	var shown map[string]json.RawMessage
	for _, s := range out.Result["skills"].([]map[string]any) {
		if s["name"] == "echo" {
			shown = s["metadata"].(map[string]json.RawMessage)
		}
	}
	if len(shown) == 0 {
		t.Fatalf("discover shows no metadata of echo: %v", out.Result)
	}
	for k, v := range shown {
		shown[k] = json.RawMessage(`"changed"`)
		v[0] = 'X'
	}
	for _, s := range c.Skills() {
		for k, v := range s.Metadata {
			if string(v) == `"changed"` || v[0] == 'X' {
				t.Fatalf("a caller's change reached the catalog: %s = %s", k, v)
			}
		}
	}
}
