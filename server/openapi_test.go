package server

import (
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
		"BudgetLine": kernel.BudgetLine{}, "Message": mailbox.Message{}, "MessageList": kernel.MessageList{},
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
