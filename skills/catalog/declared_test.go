package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/skills/runner"
	"github.com/libos/libos/skills/skillpkg"
	"github.com/libos/libos/tools"
)

// prepareAndInvoke runs a call as the kernel does: the broker checks the
// arguments against the tool's advertised schema, then the tool is invoked.
func prepareAndInvoke(t *testing.T, tl *tools.Tool, sys tools.Syscalls, raw string) (tools.Outcome, error) {
	t.Helper()
	b, err := tools.NewBroker(tl)
	if err != nil {
		t.Fatal(err)
	}
	_, args, err := b.Prepare(tl.Name, json.RawMessage(raw))
	if err != nil {
		return tools.Outcome{}, err
	}
	return tl.Invoke(context.Background(), sys, args)
}

// The model is shown each input's declared schema exactly, and a call the
// runner would refuse is refused before its effect starts: by the broker
// for the keywords tools/schema checks, by the runner's own check in Invoke
// for the rest.
func TestInputSchemaCarriesDeclaredSchema(t *testing.T) {
	root := t.TempDir()
	writePackage(t, root, "levels", skillMD("levels"), `run:
  type: cli-tool
  command: cat
  input_mode: stdin
  inputs:
    level:
      required: true
      description: How loud.
      schema: {enum: [low, high]}
    limit:
      type: integer
      default: 3
      schema: {minimum: 1, maximum: 10}
    opts:
      type: object
      schema:
        additionalProperties: false
        properties:
          depth: {type: integer, maximum: 5}
    code:
      type: string
      schema: {pattern: "^[a-z]+$", maxLength: 8}
`, nil)
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tl := toolByName(t, c.Tools(), "levels")
	got, err := json.Marshal(tl.Schema)
	if err != nil {
		t.Fatal(err)
	}
	var rendered struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(got, &rendered); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"level": `{"type":"string","description":"How loud.","enum":["low","high"]}`,
		"limit": `{"type":"integer","minimum":1,"maximum":10,"default":3}`,
		"opts":  `{"type":"object","additionalProperties":false,"properties":{"depth":{"type":"integer","maximum":5}}}`,
	} {
		if g := canonical(t, rendered.Properties[name]); g != canonical(t, []byte(want)) {
			t.Errorf("input %s advertised as\n %s\nwant the declared schema\n %s", name, g, canonical(t, []byte(want)))
		}
	}
	// pattern is beyond tools/schema: the checked schema carries the rest,
	// and the model is given every input's schema exactly as declared.
	if g := canonical(t, rendered.Properties["code"]); g != canonical(t, []byte(`{"type":"string","maxLength":8}`)) {
		t.Fatalf("code checked as %s", g)
	}
	var params struct {
		Type                 string                     `json:"type"`
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(tl.Parameters, &params); err != nil {
		t.Fatalf("parameters %s: %v", tl.Parameters, err)
	}
	if params.Type != "object" || strings.Join(params.Required, ",") != "level" || params.AdditionalProperties == nil || *params.AdditionalProperties {
		t.Fatalf("parameters %s", tl.Parameters)
	}
	if g := canonical(t, params.Properties["code"]); g != canonical(t, []byte(`{"type":"string","pattern":"^[a-z]+$","maxLength":8}`)) {
		t.Fatalf("code given to the model as %s, want its declared schema", g)
	}
	if g := canonical(t, params.Properties["level"]); g != canonical(t, rendered.Properties["level"]) {
		t.Fatalf("level given to the model as %s, checked as %s", g, rendered.Properties["level"])
	}

	for raw, want := range map[string]string{
		`{"level": "medium"}`:                       "level: must be one of",
		`{"level": "low", "limit": 11}`:             "limit: must be <= 10",
		`{"level": "low", "opts": {"deep": 1}}`:     "opts.deep: unknown field",
		`{"level": "low", "opts": {"depth": 6}}`:    "opts.depth: must be <= 5",
		`{"level": "low", "code": "toolongcode"}`:   "code: must be at most 8 characters",
		`{"level": "low", "code": "UPPER"}`:         `input "code" breaks its schema`,
		`{"level": "low", "code": "ok", "x": true}`: "x: unknown field",
	} {
		out, err := prepareAndInvoke(t, tl, &fakeSys{}, raw)
		te := wantToolError(t, err, tools.CodeInvalidArguments, want)
		if out.Effect != nil || te.EffectStarted {
			t.Fatalf("%s: refused arguments started the effect", raw)
		}
	}

	// A call that passes runs the real command with the defaults applied.
	out, err := prepareAndInvoke(t, tl, &fakeSys{}, `{"level": "high", "opts": {"depth": 2}, "code": "abc"}`)
	if err != nil || out.Effect == nil {
		t.Fatalf("valid call: %+v %v", out, err)
	}
	res, err := out.Effect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := outputOf(t, res); got != `{"code":"abc","level":"high","limit":3,"opts":{"depth":2}}` {
		t.Fatalf("output %s", got)
	}
}

// runxToolManifest is a bundled tool in runx's form, with every field runx
// defines.
const runxToolManifest = `{
  "schema": "runx.tool.manifest.v1",
  "name": "text.echo",
  "version": "1.2.0",
  "description": "Echo the inputs.",
  "source": {"type": "cli-tool", "command": "cat", "input_mode": "stdin", "timeout_seconds": 5},
  "inputs": {"text": {"type": "string", "required": true, "description": "What to echo."}},
  "scopes": ["text.echo"],
  "risk": {"mutating": false, "level": "low"},
  "retry": {"max_attempts": 2},
  "idempotency": {"key": "text"},
  "mutating": false,
  "artifacts": {"wrap_as": "echoed", "packet": "runx.echo.v1"}
}`

// runx's own bundled-tool manifest form is admitted through the catalog and
// its tool runs; a field runx does not define, or one of the wrong shape, is
// refused naming it.
func TestRunxToolManifestAdmittedAndRuns(t *testing.T) {
	root := t.TempDir()
	writePackage(t, root, "texts", skillMD("texts"), "", map[string]string{
		"tools/text/echo/manifest.json": runxToolManifest,
	})
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pkg, _ := c.Package("texts")
	bt, ok := pkg.Tool("text.echo")
	if !ok || bt.Version != "1.2.0" || bt.Description != "Echo the inputs." || bt.Runner.Command != "cat" ||
		bt.Runner.InputMode != skillpkg.InputModeStdin || !slices.Equal(bt.Runner.Scopes, []string{"text.echo"}) ||
		bt.Runner.Retry == nil || bt.Runner.Retry.MaxAttempts != 2 || bt.Runner.IdempotencyKey != "text" ||
		bt.Runner.Mutating == nil || *bt.Runner.Mutating || bt.Runner.Metadata["artifacts"] == nil {
		t.Fatalf("tool %+v runner %+v", bt, bt.Runner)
	}
	tl := toolByName(t, c.Tools(), "text_echo")
	if !strings.HasPrefix(tl.Description, "Echo the inputs.") {
		t.Fatalf("description %q", tl.Description)
	}
	sys := &fakeSys{grants: map[string]bool{"execute scope:text.echo": true}}
	res, err := runEffect(t, tl, sys, `{"text": "hi"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputOf(t, res); got != `{"text":"hi"}` {
		t.Fatalf("output %s", got)
	}

	for _, tc := range []struct{ name, from, to, want string }{
		{"generated field", "\"mutating\": false,\n", "\"mutating\": false, \"runtime\": {},\n",
			`tools/text/echo/manifest.json:12: runtime: is not a known field (allowed: schema, name, version, description, source, inputs, scopes, risk, retry, idempotency, mutating, artifacts)`},
		{"retry shape", `"retry": {"max_attempts": 2},`, `"retry": 3,`, `retry: must be a mapping, got a number`},
		{"mutating shape", "\"mutating\": false,\n", "\"mutating\": \"no\",\n", `:12: mutating: must be a boolean, got a string`},
		{"risk shape", `"risk": {"mutating": false, "level": "low"},`, `"risk": "low",`, `risk: must be a mapping, got a string`},
		{"idempotency shape", `"idempotency": {"key": "text"},`, `"idempotency": {"token": "text"},`, `idempotency.token: is not a known field (allowed: key)`},
		{"artifacts shape", `"artifacts": {"wrap_as": "echoed", "packet": "runx.echo.v1"}`, `"artifacts": {"packet": "runx.echo.v1"}`, `artifacts.packet: requires artifacts.wrap_as`},
		{"version shape", `"version": "1.2.0",`, `"version": 1,`, `version: must be a string, got a number`},
		{"schema marker", `"schema": "runx.tool.manifest.v1",`, `"schema": "runx.tool.manifest.v2",`, `schema: must be "runx.tool.manifest.v1", got "runx.tool.manifest.v2"`},
		{"schema missing", `"schema": "runx.tool.manifest.v1",`, ``, `schema: is required in runx's form and must be "runx.tool.manifest.v1"`},
		{"source missing", `"source": {"type": "cli-tool", "command": "cat", "input_mode": "stdin", "timeout_seconds": 5},`, ``, `source: is required`},
		{"source field", `"input_mode": "stdin"`, `"input_mode": "file"`, `source.input_mode: must be one of args, stdin, none, got "file"`},
		{"source command", `"command": "cat", `, ``, `source.command: is required for a cli-tool runner`},
		{"source type", `"type": "cli-tool"`, `"type": "agent-task"`, `source.type: must be one of javascript, cli-tool, got "agent-task"`},
		{"runner beside source", `"version": "1.2.0",`, `"version": "1.2.0", "runner": {},`, `schema: is not a known field of libos's form`},
		{"name mismatch", `"name": "text.echo",`, `"name": "text.other",`, `name: must be "text.echo" to match the path tools/text/echo, got "text.other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(runxToolManifest, tc.from, tc.to, 1)
			if doc == runxToolManifest {
				t.Fatal("the edit did not apply")
			}
			dir := t.TempDir()
			writePackage(t, dir, "texts", skillMD("texts"), "", map[string]string{"tools/text/echo/manifest.json": doc})
			_, err := catalog.LoadCatalog([]string{dir}, testOptions(t))
			if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tools/text/echo/manifest.json") {
				t.Fatalf("LoadCatalog error %v, want %q", err, tc.want)
			}
		})
	}

	// libos's own form keeps working beside it.
	dir := t.TempDir()
	writePackage(t, dir, "texts", skillMD("texts"), "", map[string]string{
		"tools/text/echo/manifest.json": `{"name": "text.echo", "description": "d", "runner": {"type": "cli-tool", "command": "cat", "input_mode": "stdin"}}`,
	})
	c2, err := catalog.LoadCatalog([]string{dir}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if res, err := runEffect(t, toolByName(t, c2.Tools(), "text_echo"), &fakeSys{}, `{"a": 1}`); err != nil || outputOf(t, res) != `{"a":1}` {
		t.Fatalf("libos form: %v %v", res, err)
	}
}

// A manifest.json one or two levels short of tools/<namespace>/<tool>/ is
// refused, not silently skipped.
func TestMisplacedToolManifestRefused(t *testing.T) {
	for _, rel := range []string{"tools/text/manifest.json", "tools/manifest.json"} {
		t.Run(rel, func(t *testing.T) {
			root := t.TempDir()
			writePackage(t, root, "texts", skillMD("texts"), "", map[string]string{rel: strings.ReplaceAll(runxToolManifest, "text.echo", "text")})
			_, err := catalog.LoadCatalog([]string{root}, testOptions(t))
			want := rel + ": bundled tool manifests must be at tools/<namespace>/<tool>/manifest.json"
			if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadCatalog error %v, want %q", err, want)
			}
		})
	}
	// Other plain files there are not tools and stay allowed.
	root := t.TempDir()
	writePackage(t, root, "texts", skillMD("texts"), "", map[string]string{"tools/README.md": "x", "tools/text/notes.json": "{}"})
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// Scopes are opaque exact strings: one holding spaces is admitted as
// written, and a grant names it with its whitespace percent-encoded, since a
// resource name cannot hold a space.
func TestScopesAreOpaqueExactStrings(t *testing.T) {
	const spaced, url = "opaque capability with spaces", "https://provider.example/auth/custom.scope?mode=read,write"
	root := t.TempDir()
	writePackage(t, root, "opaque", skillMD("opaque"), `run:
  type: cli-tool
  command: cat
  input_mode: stdin
  scopes: ["`+spaced+`", "`+url+`", "`+spaced+`", "100%"]
`, map[string]string{
		"tools/text/echo/manifest.json": strings.Replace(runxToolManifest, `["text.echo"]`, `["`+spaced+`"]`, 1),
	})
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pkg, _ := c.Package("opaque")
	r, _ := pkg.Runner("")
	if want := []string{spaced, url, spaced, "100%"}; !slices.Equal(r.Scopes, want) {
		t.Fatalf("declared scopes %q, want %q as written", r.Scopes, want)
	}
	tl := toolByName(t, c.Tools(), "opaque")
	if want := []string{spaced, url, "100%"}; !slices.Equal(tl.Scopes, want) {
		t.Fatalf("tool scopes %q, want %q", tl.Scopes, want)
	}
	spacedRes := "scope:opaque%20capability%20with%20spaces"
	if got := capabilities.ScopeResource(spaced); got != spacedRes {
		t.Fatalf("ScopeResource(%q) = %q", spaced, got)
	}
	if got := capabilities.ScopeResource("100%"); got != "scope:100%25" {
		t.Fatalf("ScopeResource(100%%) = %q", got)
	}
	if !strings.Contains(tl.Description, "Needs execute on "+spacedRes+", scope:"+url+", scope:100%25.") {
		t.Fatalf("description %q", tl.Description)
	}

	// Without the spaced scope's grant nothing runs; with every grant it runs.
	grants := map[string]bool{"execute scope:" + url: true, "execute scope:100%25": true}
	out, err := call(t, tl, &fakeSys{grants: grants}, `{}`)
	if !errors.Is(err, tools.ErrDenied) || out.Effect != nil || !strings.Contains(err.Error(), spacedRes) {
		t.Fatalf("without %s: %+v %v", spacedRes, out, err)
	}
	grants["execute "+spacedRes] = true
	sys := &fakeSys{grants: grants}
	res, err := runEffect(t, tl, sys, `{"x": 1}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputOf(t, res); got != `{"x":1}` {
		t.Fatalf("output %s", got)
	}
	if want := []string{"execute " + spacedRes, "execute scope:" + url, "execute scope:100%25"}; !slices.Equal(sys.authorized, want) {
		t.Fatalf("authorized %q, want %q", sys.authorized, want)
	}
	if bt := toolByName(t, c.Tools(), "text_echo"); !slices.Equal(bt.Scopes, []string{spaced}) {
		t.Fatalf("bundled tool scopes %q", bt.Scopes)
	}

	// A plain string is refused, not split: it would change a spaced scope.
	dir := t.TempDir()
	writePackage(t, dir, "opaque", skillMD("opaque"), "run: {type: cli-tool, command: cat, scopes: \""+spaced+"\"}\n", nil)
	_, err = catalog.LoadCatalog([]string{dir}, testOptions(t))
	if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), `run.scopes: must be a list of strings, got a string`) {
		t.Fatalf("plain string scopes: %v", err)
	}
}

// A run of the same tool through the runner refuses the arguments the tool
// refused, with the runner's message.
func TestInvokeCheckMatchesRunner(t *testing.T) {
	root := t.TempDir()
	writePackage(t, root, "codes", skillMD("codes"), "run:\n  type: cli-tool\n  command: cat\n  input_mode: stdin\n  inputs:\n    code: {type: string, schema: {pattern: \"^[a-z]+$\"}}\n", nil)
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = prepareAndInvoke(t, toolByName(t, c.Tools(), "codes"), &fakeSys{}, `{"code": "UP"}`)
	te := wantToolError(t, err, tools.CodeInvalidArguments)
	pkg, _ := c.Package("codes")
	env := runner.Run(context.Background(), pkg, "", json.RawMessage(`{"code": "UP"}`), runner.RunOptions{Workspace: c.Workspace(), LookupEnv: os.LookupEnv, TempDir: filepath.Join(t.TempDir())})
	if env.Error == nil || !strings.Contains(te.Message, strings.TrimPrefix(env.Error.Message, "runner default: ")) {
		t.Fatalf("tool error %q, runner error %+v", te.Message, env.Error)
	}
}

// The checked schema never refuses what the declared one allows: a numeric
// enum (1.0 and 1 are one value) and a default below an input are left to
// the runner's own check.
func TestCheckedSchemaIsNeverStricterThanTheDeclared(t *testing.T) {
	r := &skillpkg.Runner{Inputs: []skillpkg.InputDecl{
		{Name: "level", Type: skillpkg.TypeNumber, Schema: mustSchema(t, `{"type":"number","enum":[1.0,2]}`)},
		{Name: "opts", Type: skillpkg.TypeObject, Schema: mustSchema(t, `{"type":"object","properties":{"depth":{"type":"integer","maximum":5,"default":9}}}`)},
	}}
	checked, params, err := catalog.InputSchema(r)
	if err != nil || params == nil {
		t.Fatalf("InputSchema: %v, parameters %s", err, params)
	}
	for _, args := range []string{`{"level": 1}`, `{"level": 2, "opts": {}}`} {
		got, err := checked.Normalize(json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s refused by the checked schema: %v", args, err)
		}
		if _, err := skillpkg.ResolveInputs(r.Inputs, got); err != nil {
			t.Fatalf("%s (normalized %s) refused by the runner: %v", args, got, err)
		}
	}
	if _, err := skillpkg.ResolveInputs(r.Inputs, json.RawMessage(`{"level": 3}`)); err == nil {
		t.Fatal("the runner's own check lost the enum")
	}
}

// mustSchema compiles a declared input schema as admission does.
func mustSchema(t *testing.T, raw string) *skillpkg.Schema {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	s, err := skillpkg.CompileSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
