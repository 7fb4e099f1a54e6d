package server

import (
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
)

// The document describes exactly the routes the server has.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	paths := openAPI.doc["paths"].(map[string]any)
	var documented, routed []string
	ids := map[string]bool{}
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			documented = append(documented, strings.ToUpper(method)+" "+path)
			o := op.(map[string]any)
			id, _ := o["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s %s: operationId %q missing or repeated", method, path, id)
			}
			ids[id] = true
			resp := o["responses"].(map[string]any)
			for _, code := range []string{"401", "403"} {
				if resp[code] == nil {
					t.Errorf("%s %s does not document %s", method, path, code)
				}
			}
			if (method == "post" || method == "put") && o["requestBody"] != nil && resp["400"] == nil {
				t.Errorf("%s %s takes a body but documents no 400", method, path)
			}
		}
	}
	for _, r := range apiRoutes {
		routed = append(routed, r.method+" "+r.path)
		checkRequestBody(t, r, paths)
		checkAnswers(t, r, paths)
	}
	sort.Strings(documented)
	sort.Strings(routed)
	if !slices.Equal(documented, routed) {
		t.Fatalf("documented %v\nrouted     %v", documented, routed)
	}
}

// checkRequestBody checks that r's operation documents, as its request
// body, the schema named after the type r decodes, or no body when r
// decodes none.
func checkRequestBody(t *testing.T, r route, paths map[string]any) {
	t.Helper()
	op, _ := paths[r.path].(map[string]any)[strings.ToLower(r.method)].(map[string]any)
	var documented string
	if body, ok := op["requestBody"].(map[string]any); ok {
		schema := body["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
		ref, _ := schema["$ref"].(string)
		documented = strings.TrimPrefix(ref, "#/components/schemas/")
		if documented == "" || body["required"] != true {
			t.Errorf("%s %s: the request body is not a required $ref of a schema", r.method, r.path)
		}
	}
	var decoded string
	if r.body != nil {
		decoded = r.body.Name()
	}
	if documented != decoded {
		t.Errorf("%s %s documents the body %q, the handler decodes %q", r.method, r.path, documented, decoded)
	}
}

// checkAnswers checks that r's operation documents the query parameters r
// reads, and every status r can answer: 400 (an unknown query parameter,
// at least), 413 and 415 when it reads a body, 409 (a read-only runtime)
// and 507 when it changes the runtime, and 500 and 503 when it calls it.
func checkAnswers(t *testing.T, r route, paths map[string]any) {
	t.Helper()
	op, _ := paths[r.path].(map[string]any)[strings.ToLower(r.method)].(map[string]any)
	var query []string
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		if p := p.(map[string]any); p["in"] == "query" {
			query = append(query, p["name"].(string))
		}
	}
	if !slices.Equal(query, r.query) {
		t.Errorf("%s %s documents the query parameters %v, reads %v", r.method, r.path, query, r.query)
	}
	want := []string{"400"}
	if r.method != "GET" {
		want = append(want, "409", "413", "415", "507")
	}
	if r.path != "/openapi.json" {
		want = append(want, "503")
		if r.path != "/events" {
			want = append(want, "500")
		}
	}
	resp := op["responses"].(map[string]any)
	for _, code := range want {
		if resp[code] == nil {
			t.Errorf("%s %s does not document %s", r.method, r.path, code)
		}
	}
}

// The document lists what the server answers: an action refuses a body
// that is not JSON (415) or too large (413), and every operation answers
// 503 once the runtime is closed. f.do checks each answer against it.
func TestOpenAPIListsEveryAnswer(t *testing.T) {
	f := newFixture(t, messageScript, func(o *Options) { o.MaxBodyBytes = 64 })
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait"}, nil)
	f.run()
	var cp kernel.Checkpoint
	f.must(http.StatusCreated, "POST", "/processes/1/checkpoints", nil, &cp)
	for _, path := range []string{"/processes/1/checkpoints", "/checkpoints/" + cp.ID + "/restore", "/checkpoints/" + cp.ID + "/fork"} {
		if r := f.do("POST", path, "{}", "Content-Type", "text/plain"); r.status != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s as text: %d %s", path, r.status, r.body)
		}
		if r := f.do("POST", path, `{"x": "`+strings.Repeat("x", 100)+`"}`); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s too large: %d %s", path, r.status, r.body)
		}
	}
	if err := f.rt.Close(); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{"/processes": `{"image": "base:v0", "goal": "x"}`, "/processes/{pid}/messages": `{"body": "hi"}`,
		"/processes/{pid}/signal": `{"signal": "kill"}`, "/processes/{pid}/goal": `{"goal": "x"}`, "/approvals/{pid}/{call_id}": `{"decision": "approve"}`,
		"/approvals": `{"pid": 1, "call_id": "c1", "decision": "approve"}`}
	for _, r := range apiRoutes {
		if r.path == "/events" || r.path == "/openapi.json" {
			continue
		}
		path := strings.NewReplacer("{pid}", "1", "{call_id}", "c1", "{id}", cp.ID, "{oid}", "obj-1").Replace(r.path)
		var body any
		if b, ok := bodies[r.path]; ok && r.method != "GET" {
			body = b
		}
		if got := f.do(r.method, path, body); got.status != http.StatusServiceUnavailable {
			t.Errorf("%s %s on a closed runtime: %d %s", r.method, path, got.status, got.body)
		}
	}
}

// jsonFields are the JSON names of a struct's fields, embedded ones included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

func schemaProps(t *testing.T, name string) (props []string, required []string, strict bool) {
	t.Helper()
	s, ok := openAPI.doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("no schema %s", name)
	}
	for p := range s["properties"].(map[string]any) {
		props = append(props, p)
	}
	for _, r := range s["required"].([]any) {
		required = append(required, r.(string))
	}
	strict = s["additionalProperties"] == false
	sort.Strings(props)
	return props, required, strict
}

// Request schemas are exactly the bodies the handlers decode (which refuse
// unknown fields); answer schemas document every field the answers carry.
func TestOpenAPISchemasMatchTheTypes(t *testing.T) {
	exact := map[string]reflect.Type{
		"SpawnResponse": reflect.TypeFor[SpawnResponse](), "GoalSet": reflect.TypeFor[GoalSet](),
		"Decision": reflect.TypeFor[Decision](), "ProcessRow": reflect.TypeFor[ProcessRow](),
	}
	for _, r := range apiRoutes {
		if r.body != nil {
			exact[r.body.Name()] = r.body
		}
	}
	for name, typ := range exact {
		props, required, strict := schemaProps(t, name)
		fields := jsonFields(typ)
		sort.Strings(fields)
		if !slices.Equal(props, fields) || !strict {
			t.Errorf("schema %s has %v (closed %v), the type %v", name, props, strict, fields)
		}
		for _, r := range required {
			if !slices.Contains(fields, r) {
				t.Errorf("schema %s requires %s, which the type lacks", name, r)
			}
		}
	}
	covers := map[string]any{
		"ProcessDetail": kernel.ProcessDetail{}, "Wait": kernel.WaitDetail{}, "Grant": kernel.GrantView{},
		"BudgetLine": kernel.BudgetLine{}, "Message": mailbox.Message{}, "MessageList": MessagePage{},
		"SignalReport": kernel.SignalReport{}, "GoalView": kernel.GoalView{}, "ContextView": kernel.ContextView{},
		"ObjectMeta": objects.Meta{}, "ObjectView": kernel.ObjectView{}, "Approval": kernel.Approval{},
		"Checkpoint": kernel.Checkpoint{}, "RestoreReport": kernel.RestoreReport{}, "ForkReport": kernel.ForkReport{},
		"LogEntry": kernel.LogEntry{},
	}
	for name, v := range covers {
		props, _, _ := schemaProps(t, name)
		for _, f := range jsonFields(reflect.TypeOf(v)) {
			if !slices.Contains(props, f) {
				t.Errorf("schema %s does not document the field %s of %T", name, f, v)
			}
		}
	}
}
