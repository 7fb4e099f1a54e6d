package clitool

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestNormalizeInputName(t *testing.T) {
	tests := map[string]string{
		"thread.title":          "THREAD_TITLE",
		"  Padded--Name__x ":    "PADDED_NAME_X",
		"a":                     "A",
		"ALREADY_UPPER":         "ALREADY_UPPER",
		"__x__":                 "X",
		"a.b.c":                 "A_B_C",
		"9lives":                "9LIVES",
		"camelCase":             "CAMELCASE",
		"h\u00e9llo w\u00f6rld": "H_LLO_W_RLD",
		"...":                   "",
		"":                      "",
		"a\x00b":                "A_B",
	}
	for in, want := range tests {
		if got := NormalizeInputName(in); got != want {
			t.Errorf("NormalizeInputName(%q) = %q, want %q", in, got, want)
		}
	}
}

func raws(m map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = json.RawMessage(v)
	}
	return out
}

func TestPlanInputsRefusesCollisions(t *testing.T) {
	tests := []struct {
		inputs  map[string]string
		wantErr string
	}{
		{map[string]string{"a.b": "1", "A_B": "2"}, `inputs "A_B" and "a.b" both map to the variable RUNX_INPUT_A_B`},
		{map[string]string{"x": "1", " x ": "2"}, `both map to the variable RUNX_INPUT_X`},
		{map[string]string{"s": "1", "s.path": "2"}, `inputs "s" and "s.path" both map to the variable RUNX_INPUT_S_PATH`},
		{map[string]string{"...": "1"}, `input name "..." has no letter or digit`},
	}
	for _, tc := range tests {
		_, err := planInputs(raws(tc.inputs))
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("planInputs(%v) error = %v, want %q", tc.inputs, err, tc.wantErr)
		}
	}
}

// TestPlanInputsRefusesNamesTooLongForAFile: an input whose file name would
// pass 255 bytes is refused as invalid, naming it, before anything is
// written; one at the limit is planned.
func TestPlanInputsRefusesNamesTooLongForAFile(t *testing.T) {
	atLimit := strings.Repeat("a", maxFileName-len(inputFilePrefix))
	if _, err := planInputs(raws(map[string]string{atLimit: `1`})); err != nil {
		t.Fatalf("a name at the limit: %v", err)
	}
	_, err := planInputs(raws(map[string]string{atLimit + "b": `1`}))
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("a name one byte over: %v, want invalid_request", err)
	}
}

func TestPlanInputsTransport(t *testing.T) {
	plan, err := planInputs(raws(map[string]string{
		"thread.title": `"Hello \"world\"\n"`,
		"opts":         `{ "depth": 2 }`,
		"n":            `12`,
		"nul":          `"a\u0000b"`,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if string(plan.all) != `{"n":12,"nul":"a\u0000b","opts":{"depth":2},"thread.title":"Hello \"world\"\n"}` {
		t.Fatalf("all = %s", plan.all)
	}
	env, err := plan.transportEnv("/ws", "/tmp/d/inputs.json", func(f inputFile) string { return "/tmp/d/" + f.norm }, MaxStartBytes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"RUNX_CWD":                     "/ws",
		"RUNX_INPUTS_PATH":             "/tmp/d/inputs.json",
		"RUNX_INPUTS_JSON":             string(plan.all),
		"RUNX_INPUT_THREAD_TITLE":      "Hello \"world\"\n",
		"RUNX_INPUT_THREAD_TITLE_PATH": "/tmp/d/THREAD_TITLE",
		"RUNX_INPUT_OPTS":              `{"depth":2}`,
		"RUNX_INPUT_OPTS_PATH":         "/tmp/d/OPTS",
		"RUNX_INPUT_N":                 "12",
		"RUNX_INPUT_N_PATH":            "/tmp/d/N",
		// A NUL byte cannot be in an environment value: path only.
		"RUNX_INPUT_NUL_PATH": "/tmp/d/NUL",
	}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("transport env:\n%v\nwant\n%v", env, want)
	}
}

func TestPlanInputsInlineLimits(t *testing.T) {
	str := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
	tests := []struct {
		name           string
		inputs         map[string]string
		wantAllInline  bool
		wantInlineVars []string
	}{
		{"value at 8 KiB is inline", map[string]string{"v": str(MaxInlineInput)}, true, []string{"RUNX_INPUT_V"}},
		{"value above 8 KiB is by path only", map[string]string{"v": str(MaxInlineInput + 1)}, true, nil},
		// {"v":"xxx..."} is 8 bytes of framing around the value.
		{"object at 48 KiB is inline", map[string]string{"v": str(MaxInlineInputsJSON - 8)}, true, nil},
		{"object above 48 KiB is by path only", map[string]string{"v": str(MaxInlineInputsJSON - 7)}, false, nil},
		{"80 KiB value", map[string]string{"big": str(80 << 10), "small": `"s"`}, false, []string{"RUNX_INPUT_SMALL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := planInputs(raws(tc.inputs))
			if err != nil {
				t.Fatal(err)
			}
			env, err := plan.transportEnv("/ws", "/d/inputs.json", func(f inputFile) string { return "/d/" + f.norm }, MaxStartBytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := env[EnvInputsJSON]; ok != tc.wantAllInline {
				t.Fatalf("RUNX_INPUTS_JSON present = %v for %d bytes", ok, len(plan.all))
			}
			var inline []string
			for k := range env {
				if strings.HasPrefix(k, EnvInputPrefix) && !strings.HasSuffix(k, "_PATH") {
					inline = append(inline, k)
				}
			}
			sort.Strings(inline)
			if !reflect.DeepEqual(inline, tc.wantInlineVars) {
				t.Fatalf("inline vars = %v, want %v", inline, tc.wantInlineVars)
			}
			for name := range tc.inputs {
				if _, ok := env[EnvInputPrefix+NormalizeInputName(name)+"_PATH"]; !ok {
					t.Fatalf("path variable for %q missing", name)
				}
			}
		})
	}
}

// TestPlanInputsTransportBound: the RUNX_* variables of a call stay within
// the room the arguments and other variables leave: every path, then the
// input mirrors in name order until the first that does not fit; paths that
// do not fit refuse the call.
func TestPlanInputsTransportBound(t *testing.T) {
	inputs := map[string]string{}
	for i := range 300 {
		inputs[fmt.Sprintf("v%03d", i)] = `"` + strings.Repeat("x", 8000) + `"`
	}
	// Small enough for a mirror, and after every other name: it stays by
	// path only once the mirrors have stopped.
	inputs["zz"] = `"z"`
	plan, err := planInputs(raws(inputs))
	if err != nil {
		t.Fatal(err)
	}
	// What the arguments and the other variables leave.
	const room = 900 << 10
	env, err := plan.transportEnv("/ws", "/d/inputs.json", func(f inputFile) string { return "/d/" + f.norm }, room)
	if err != nil {
		t.Fatal(err)
	}
	size, mirrored := 0, 0
	for name, v := range env {
		size += envEntrySize(name, []byte(v))
	}
	for i := range 300 {
		name := fmt.Sprintf("RUNX_INPUT_V%03d", i)
		if _, ok := env[name+"_PATH"]; !ok {
			t.Fatalf("%s_PATH missing", name)
		}
		if _, ok := env[name]; ok {
			if i != mirrored {
				t.Fatalf("%s mirrored after an earlier input was not", name)
			}
			mirrored++
		}
	}
	if size > room || mirrored == 0 || mirrored == 300 {
		t.Fatalf("%d of 300 mirrors, %d bytes of transport, want some within %d", mirrored, size, room)
	}
	if next := fmt.Sprintf("RUNX_INPUT_V%03d", mirrored); size+envEntrySize(next, []byte(strings.Repeat("x", 8000))) <= room {
		t.Fatalf("%s was left out although it fits", next)
	}
	if _, ok := env["RUNX_INPUT_ZZ"]; ok {
		t.Fatal("a mirror after the first that did not fit")
	}

	many := map[string]string{}
	for i := range 30_000 {
		many[fmt.Sprintf("v%05d", i)] = `"1"`
	}
	if plan, err = planInputs(raws(many)); err != nil {
		t.Fatal(err)
	}
	_, err = plan.transportEnv("/ws", "/d/inputs.json", func(f inputFile) string { return "/d/input_" + f.norm }, room)
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "30000 inputs") || !strings.Contains(err.Error(), "path variables") {
		t.Fatalf("30,000 paths: %v, want invalid_request naming the paths", err)
	}
}

func TestBuildEnv(t *testing.T) {
	host := map[string]string{
		"PATH": "/usr/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "TERM": "",
		"HTTPS_PROXY": "http://user:secret@proxy", "http_proxy": "x", "AWS_SECRET_ACCESS_KEY": "k", "REGION": "eu",
		"SSL_CERT_FILE": "/etc/ssl/cert.pem",
	}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	got := BuildEnv(lookup, map[string]string{"REGION": "eu", "PATH": "/usr/bin"}, map[string]string{"RUNX_CWD": "/ws"})
	want := []string{"HOME=/home/u", "LANG=C.UTF-8", "PATH=/usr/bin", "REGION=eu", "RUNX_CWD=/ws", "SSL_CERT_FILE=/etc/ssl/cert.pem", "TERM="}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("BuildEnv = %v, want %v", got, want)
	}
	if empty := BuildEnv(func(string) (string, bool) { return "", false }, nil, nil); empty == nil || len(empty) != 0 {
		t.Fatalf("BuildEnv with nothing = %#v, want an empty non-nil slice", empty)
	}
	// Transport variables win over a declared name of the same spelling.
	got = BuildEnv(nil, map[string]string{"RUNX_CWD": "/evil"}, map[string]string{"RUNX_CWD": "/ws"})
	if !reflect.DeepEqual(got, []string{"RUNX_CWD=/ws"}) {
		t.Fatalf("BuildEnv override = %v", got)
	}
}

func TestRenderArgs(t *testing.T) {
	inputs := raws(map[string]string{"title": `"Hi there"`, "n": `3`, "obj": `{"a": [1, 2]}`, "nul": `"a\u0000"`, "none": `null`})
	declared := []string{"REGION", "OPTIONAL"}
	values := map[string]string{"REGION": "eu"}
	tests := []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{args: nil, want: []string{}},
		{args: []string{"plain", "", "--t={{title}}", "{{ n }}", "{{obj}}", "{{env.REGION}}-{{env.OPTIONAL}}"},
			want: []string{"plain", "", "--t=Hi there", "3", `{"a":[1,2]}`, "eu-"}},
		{args: []string{"ok", "{{ missing }}", "--n={{none}}", "{{open"}, want: []string{"ok", "{{ missing }}", "--n=", "{{open"}},
		{args: []string{"{{env.HOME}}"}, wantErr: "args[0]: {{env.HOME}} names a variable the runner does not declare"},
		{args: []string{"{{nul}}"}, wantErr: "args[0] renders to a value holding a NUL byte"},
	}
	for _, tc := range tests {
		got, err := RenderArgs(tc.args, inputs, declared, values)
		if tc.wantErr != "" {
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("RenderArgs(%q) error = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("RenderArgs(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

func TestResolveCwd(t *testing.T) {
	tests := []struct{ cwd, want string }{
		{"", "/pkg"},
		{"{{env.RUNX_CWD}}", "/work/space"},
		{"sub/dir", "/pkg/sub/dir"},
		{"../outside", "/outside"},
		{"/abs//path/", "/abs/path"},
		{"{{env.RUNX_CWD}}/x", "/pkg/{{env.RUNX_CWD}}/x"},
	}
	for _, tc := range tests {
		if got := ResolveCwd(tc.cwd, "/pkg", "/work/space"); got != tc.want {
			t.Errorf("ResolveCwd(%q) = %q, want %q", tc.cwd, got, tc.want)
		}
	}
}

func TestResolveCommand(t *testing.T) {
	dir := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("first/tool", 0o644) // not executable: skipped
	second := mk("second/tool", 0o755)
	local := mk("pkg/bin/run", 0o755)
	if err := os.MkdirAll(filepath.Join(dir, "third/tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{"relative", "", filepath.Join(dir, "third"), filepath.Join(dir, "first"), filepath.Join(dir, "second")}, string(os.PathListSeparator))

	if got, err := resolveCommand("tool", "/nowhere", path); err != nil || got != second {
		t.Fatalf("PATH lookup = %q, %v; want %q", got, err, second)
	}
	if got, err := resolveCommand("./bin/run", filepath.Join(dir, "pkg"), ""); err != nil || got != local {
		t.Fatalf("relative command = %q, %v; want %q", got, err, local)
	}
	if got, err := resolveCommand(local, "/nowhere", ""); err != nil || got != local {
		t.Fatalf("absolute command = %q, %v", got, err)
	}
	for _, bad := range []struct{ cmd, dir, want string }{
		{"nope", "", `command "nope" was not found in PATH`},
		{"./bin/missing", filepath.Join(dir, "pkg"), "no such file"},
		{"./first/tool", dir, "is not executable"},
		{"./third/tool", dir, "is a folder"},
	} {
		if _, err := resolveCommand(bad.cmd, bad.dir, path); !errors.Is(err, ErrSpawn) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("resolveCommand(%q) error = %v, want %q", bad.cmd, err, bad.want)
		}
	}
}

func TestCaptureKeepsWholeRunesInTheRetainedPrefix(t *testing.T) {
	tests := []struct {
		name      string
		writes    []string
		limit     int
		want      string
		truncated bool
	}{
		{"fits", []string{"ab", "c"}, 8, "abc", false},
		{"exactly the limit", []string{"abcd"}, 4, "abcd", false},
		{"cut between runes", []string{"ab", "cdef"}, 4, "abcd", true},
		{"cut inside a 2-byte rune", []string{"abc\u00e9"}, 4, "abc", true},
		{"cut inside a 3-byte rune", []string{"a\u20ac\u20ac"}, 5, "a\u20ac", true},
		{"cut inside a 4-byte rune", []string{"ab\U0001F600"}, 5, "ab", true},
		{"cut right after a whole 4-byte rune", []string{"\U0001F600x"}, 4, "\U0001F600", true},
		{"invalid byte in the stream stays", []string{"ab\xffcd"}, 3, "ab\xff", true},
		{"whole stream ending in a broken rune stays as it was", []string{"ab\xe2\x82"}, 8, "ab\xe2\x82", false},
	}
	for _, tc := range tests {
		c := newCapture(tc.limit)
		total := 0
		for _, w := range tc.writes {
			c.Write([]byte(w))
			total += len(w)
		}
		s := c.stream()
		if string(s.Retained) != tc.want || s.Truncated != tc.truncated || s.Bytes != int64(total) {
			t.Errorf("%s: stream = %q truncated=%v bytes=%d; want %q truncated=%v bytes=%d", tc.name, s.Retained, s.Truncated, s.Bytes, tc.want, tc.truncated, total)
		}
	}
}

func TestOutputValue(t *testing.T) {
	stream := func(s string) Stream { c := newCapture(MaxRetainedBytes); c.Write([]byte(s)); return c.stream() }
	tests := []struct {
		name       string
		stream     Stream
		incomplete bool
		want       string
		wantErr    string
	}{
		{name: "JSON object", stream: stream("{\"a\": [1, 2]}\n"), want: `{"a":[1,2]}`},
		{name: "JSON number", stream: stream(" 42 "), want: `42`},
		{name: "JSON string", stream: stream(`"x"`), want: `"x"`},
		{name: "text", stream: stream("hello <world> & more\n"), want: `"hello <world> & more\n"`},
		{name: "two JSON values are text", stream: stream("{} {}"), want: `"{} {}"`},
		{name: "empty", stream: stream(""), want: `""`},
		{name: "not UTF-8", stream: stream("a\xffb"), wantErr: "stdout is not valid UTF-8"},
		{name: "truncated", stream: Stream{Retained: []byte("abc"), Bytes: 9 << 20, Truncated: true}, wantErr: "stdout was 9437184 bytes, more than the 8388608 retained"},
		{name: "incomplete", stream: stream("{}"), incomplete: true, wantErr: "held open by a process outside the process group"},
	}
	for _, tc := range tests {
		got, err := outputValue(tc.stream, tc.incomplete)
		if tc.wantErr != "" {
			if !errors.Is(err, ErrOutputRejected) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: output = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestRemoveInputsRemovesFilesTheProcessAdded(t *testing.T) {
	plan, err := planInputs(raws(map[string]string{"a": `1`}))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir, _, err := prepareInputs(root, plan, "/ws", MaxStartBytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "extra", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	removeInputs(dir, plan)
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestPrepareInputsReportsAnUnusableRoot(t *testing.T) {
	plan, _ := planInputs(nil)
	_, _, err := prepareInputs(filepath.Join(t.TempDir(), "missing"), plan, "/ws", MaxStartBytes)
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("err = %v, want ErrInternal", err)
	}
}
