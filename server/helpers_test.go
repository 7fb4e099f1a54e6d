package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture is a runtime on a temporary directory, driven by a replay
// script on the fake clock, with a server in front of it on loopback.
type fixture struct {
	t     *testing.T
	rt    *kernel.Runtime
	srv   *Server
	ts    *httptest.Server
	clock *clock.Fake
	token string
	// unchecked turns off the OpenAPI check of answers (for raw requests).
	unchecked bool
}

func newFixture(t *testing.T, script string, mutate ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: clock.NewFake(epoch, true)}
	n := NewNotifier()
	opts := kernel.Options{Clock: f.clock, OnEvent: n.OnEvent, Workers: 4}
	rt, err := kernel.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if script != "" {
		s, err := llm.ParseScript([]byte(script))
		if err != nil {
			t.Fatalf("script: %v", err)
		}
		p, err := llm.NewReplay(s, rt)
		if err != nil {
			t.Fatal(err)
		}
		rt.SetProvider(p)
	}
	so := Options{Notifier: n, Now: f.clock.Now, PollInterval: 20 * time.Millisecond}
	for _, m := range mutate {
		m(&so)
	}
	srv, err := New(rt, so)
	if err != nil {
		t.Fatal(err)
	}
	f.rt, f.srv, f.token = rt, srv, so.Token
	f.ts = httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close()
		f.ts.Close()
		rt.Close()
	})
	return f
}

// run runs the scheduler until the runtime is idle.
func (f *fixture) run() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.rt.RunUntilIdle(ctx); err != nil {
		f.t.Fatalf("run: %v", err)
	}
}

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// errorCode is the code of an error answer.
func (r reply) errorCode(t *testing.T) (string, string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	r.decode(t, &e)
	return e.Error.Code, e.Error.Message
}

// do sends a request to the API (path below APIPrefix) with body as JSON
// (a string or []byte is sent as it is), and checks the answer against the
// OpenAPI document.
func (f *fixture) do(method, path string, body any, header ...string) reply {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, f.ts.URL+APIPrefix+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: b}
	if !f.unchecked {
		checkAgainstDoc(f.t, method, path, r)
	}
	return r
}

// must does a request that must answer want.
func (f *fixture) must(want int, method, path string, body any, v any) reply {
	f.t.Helper()
	r := f.do(method, path, body)
	if r.status != want {
		f.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	if v != nil {
		r.decode(f.t, v)
	}
	return r
}

// openAPI is the served document, parsed, and its schemas compiled.
var openAPI = func() struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
} {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		panic("openapi.json: " + err.Error())
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(openAPIDoc))
	if err != nil {
		panic(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("mem:///openapi.json", inst); err != nil {
		panic(err)
	}
	return struct {
		doc      map[string]any
		compiler *jsonschema.Compiler
	}{doc, c}
}()

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// docOperation finds the document's path template matching path.
func docOperation(method, path string) (template string, op map[string]any) {
	path, _, _ = strings.Cut(path, "?")
	paths := openAPI.doc["paths"].(map[string]any)
	for tmpl, item := range paths {
		re := regexp.MustCompile("^" + pathParam.ReplaceAllString(strings.ReplaceAll(tmpl, ".", `\.`), `[^/]+`) + "$")
		if re.MatchString(path) {
			o, _ := item.(map[string]any)[strings.ToLower(method)].(map[string]any)
			return tmpl, o
		}
	}
	return "", nil
}

// checkAgainstDoc checks an answer against the document: the status is
// documented for the operation and a JSON body validates against its schema.
func checkAgainstDoc(t *testing.T, method, path string, r reply) {
	t.Helper()
	tmpl, op := docOperation(method, path)
	if op == nil {
		// Only unrouted requests are undocumented; they answer an error.
		if r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s answered %d but the document has no such operation", method, path, r.status)
		}
		validate(t, "#/components/schemas/Error", r.body, method+" "+path)
		return
	}
	resp, ok := op["responses"].(map[string]any)[strconv.Itoa(r.status)].(map[string]any)
	if !ok {
		t.Fatalf("%s %s (%s) answered %d, which the document does not list: %s", method, path, tmpl, r.status, r.body)
	}
	if ref, ok := resp["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/responses/")
		resp = openAPI.doc["components"].(map[string]any)["responses"].(map[string]any)[name].(map[string]any)
	}
	content, _ := resp["content"].(map[string]any)
	js, ok := content["application/json"].(map[string]any)
	if !ok {
		return
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	schema := js["schema"].(map[string]any)
	if ref, ok := schema["$ref"].(string); ok {
		validate(t, ref, r.body, method+" "+path)
		return
	}
	// An inline schema (an array of a component): validate through a
	// pointer into the document.
	ptr := "#/paths/" + escapePointer(tmpl) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(r.status) + "/content/application~1json/schema"
	validate(t, ptr, r.body, method+" "+path)
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func validate(t *testing.T, ptr string, body []byte, what string) {
	t.Helper()
	sch, err := openAPI.compiler.Compile("mem:///openapi.json" + ptr)
	if err != nil {
		t.Fatalf("compile %s: %v", ptr, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: body is not JSON: %v: %s", what, err, body)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("%s: the answer breaks the document's %s: %v\n%s", what, ptr, err, body)
	}
}

// funcProvider answers each request with a function of it.
type funcProvider func(req llm.Request) (llm.Response, error)

func (funcProvider) Name() string { return "func" }
func (f funcProvider) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	return f(req)
}

// call is a model's answer of one tool call.
func call(id, name, args string) llm.Response {
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: json.RawMessage(args)}}}
}
