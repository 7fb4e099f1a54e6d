package objmem

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

func call(t *testing.T, sys tools.Syscalls, name, args string) (map[string]any, *tools.Error) {
	t.Helper()
	out, e := toolstest.Call(Tools(tools.Config{}), sys, name, args)
	return out.Result, e
}

func grant(resource string, rights ...capabilities.Right) capabilities.Grant {
	return capabilities.Grant{Resource: resource, Rights: rights}
}

// A caller without authority gets one answer whether the Object exists or
// not, by oid and by name, for reads and writes: no OID or namespace leaks.
func TestMissingAndForbiddenObjectsAnswerAlike(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read, capabilities.Write))
	secret := sys.Put("proc-1", "secret", []byte(`"s"`))
	const missingOID = "00000000-0000-4000-8000-000000000000"
	pairs := []struct{ tool, existing, missing string }{
		{"read_object", `{"oid":"` + secret.OID + `"}`, `{"oid":"` + missingOID + `"}`},
		{"read_object", `{"namespace":"proc-1","name":"secret"}`, `{"namespace":"proc-1","name":"nothing"}`},
		{"write_object", `{"oid":"` + secret.OID + `","expected_version":1,"payload":1}`, `{"oid":"` + missingOID + `","expected_version":1,"payload":1}`},
	}
	for _, p := range pairs {
		_, e1 := call(t, sys, p.tool, p.existing)
		_, e2 := call(t, sys, p.tool, p.missing)
		if e1 == nil || e2 == nil || e1.Code != tools.CodeDenied || e2.Code != tools.CodeDenied {
			t.Fatalf("%s: want two denials, got %v / %v", p.tool, e1, e2)
		}
		// The messages differ only in the identifier the caller gave.
		m1 := strings.NewReplacer(secret.OID, "ID", `"secret"`, "NAME").Replace(e1.Message)
		m2 := strings.NewReplacer(missingOID, "ID", `"nothing"`, "NAME").Replace(e2.Message)
		if m1 != m2 || strings.Contains(e1.Message, "proc-1 ") && !strings.Contains(p.existing, "proc-1") {
			t.Fatalf("%s answers differ:\n existing: %s\n missing:  %s", p.tool, e1.Message, e2.Message)
		}
	}
	if v := sys.Metas[secret.OID].Version; v != 1 {
		t.Fatalf("a denied write changed the Object: version %d", v)
	}
}

// With authority, a missing Object is reported as missing and an existing
// one is read; a grant on the Object alone is enough.
func TestAuthorizedReads(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read, capabilities.Write))
	mine := sys.Put("proc-2", "mine", []byte(`{"a":1}`))
	other := sys.Put("proc-1", "shared", []byte(`"hello"`))
	sys.Grants = append(sys.Grants, grant("object:"+other.OID, capabilities.Read))

	if out, e := call(t, sys, "read_object", `{"namespace":"proc-2","name":"mine"}`); e != nil || out["oid"] != mine.OID {
		t.Fatalf("own read: %v %v", out, e)
	}
	if _, e := call(t, sys, "read_object", `{"namespace":"proc-2","name":"gone"}`); e == nil || e.Code != tools.CodeNotFound {
		t.Fatalf("authorized missing read: %v", e)
	}
	for _, args := range []string{`{"oid":"` + other.OID + `"}`, `{"namespace":"proc-1","name":"shared"}`} {
		out, e := call(t, sys, "read_object", args)
		if e != nil || string(out["payload"].(json.RawMessage)) != `"hello"` {
			t.Fatalf("read through an Object grant %s: %v %v", args, out, e)
		}
	}
}

func TestWriteIsCompareAndSwap(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read, capabilities.Write))
	out, e := call(t, sys, "create_object", `{"name":"n","payload":1}`)
	if e != nil {
		t.Fatal(e)
	}
	oid := out["oid"].(string)
	if _, e := call(t, sys, "write_object", `{"oid":"`+oid+`","expected_version":2,"payload":2}`); e == nil || e.Code != tools.CodeConflict {
		t.Fatalf("stale write: %v", e)
	}
	if out, e := call(t, sys, "write_object", `{"oid":"`+oid+`","expected_version":1,"payload":2}`); e != nil || out["version"] != uint64(2) {
		t.Fatalf("write: %v %v", out, e)
	}
	if _, e := call(t, sys, "create_object", `{"namespace":"proc-1","name":"n","payload":1}`); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("create in a foreign namespace: %v", e)
	}
}

// list_objects lists a namespace the caller may read, by name; a read of a
// payload a reopen lost is reported as lost, never as empty.
func TestListAndLostPayload(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read))
	b := sys.Put("proc-2", "b", []byte(`2`))
	sys.Put("proc-2", "a", []byte(`1`))
	out, e := call(t, sys, "list_objects", `{}`)
	if e != nil || out["namespace"] != "proc-2" {
		t.Fatalf("list: %v %v", out, e)
	}
	list := out["objects"].([]map[string]any)
	if len(list) != 2 || list[0]["name"] != "a" || list[1]["name"] != "b" {
		t.Fatalf("listed %v", list)
	}
	if _, e := call(t, sys, "list_objects", `{"namespace":"proc-1"}`); e == nil || e.Code != tools.CodeDenied || !strings.Contains(e.Message, "object_namespace:proc-1") {
		t.Fatalf("list a foreign namespace: %v", e)
	}
	sys.Lost[b.OID] = true
	if _, e := call(t, sys, "read_object", `{"oid":"`+b.OID+`"}`); e == nil || e.Code != tools.CodeNotFound || !strings.Contains(e.Message, "version 1") {
		t.Fatalf("lost payload: %v", e)
	}
	for _, bad := range []string{`{}`, `{"oid":"` + b.OID + `","name":"b"}`} {
		if _, e := call(t, sys, "read_object", bad); e == nil || e.Code != tools.CodeInvalidArguments {
			t.Fatalf("read_object %s: %v", bad, e)
		}
	}
}
