package objmem

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
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

// list_objects lists a page at a time: limit Objects by name after after,
// has_more and next_after leading to the rest; a page also stops at
// MaxListBytes of metadata, and a limit out of range is refused by name.
func TestListObjectsPages(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read))
	for _, name := range []string{"e", "a", "d", "c", "b"} {
		sys.Put("proc-2", name, []byte(`1`))
	}
	var names []string
	after, pages := "", 0
	for {
		out, e := call(t, sys, "list_objects", `{"limit":2,"after":"`+after+`"}`)
		if e != nil {
			t.Fatalf("list after %q: %v", after, e)
		}
		pages++
		for _, o := range out["objects"].([]map[string]any) {
			names = append(names, o["name"].(string))
		}
		if out["has_more"] != true {
			if _, ok := out["next_after"]; ok {
				t.Fatalf("last page names a next_after: %v", out)
			}
			break
		}
		after = out["next_after"].(string)
	}
	if strings.Join(names, "") != "abcde" || pages != 3 {
		t.Fatalf("paged through %v in %d pages, want a..e in 3", names, pages)
	}
	out, _ := call(t, sys, "list_objects", `{}`)
	if len(out["objects"].([]map[string]any)) != 5 || out["has_more"] != false {
		t.Fatalf("default limit: %v", out)
	}
	for _, bad := range []string{`{"limit":0}`, `{"limit":1001}`, `{"limit":1.5}`} {
		if _, e := call(t, sys, "list_objects", bad); e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, "limit") {
			t.Fatalf("list_objects %s: %v, want invalid_arguments naming limit", bad, e)
		}
	}

	// Objects whose labels are near their bound: a page of 100 stops at
	// the byte bound and says where to go on.
	big := toolstest.New(3, grant("object_namespace:proc-3", capabilities.Read))
	labels := map[string]string{}
	for i := range 64 {
		labels[fmt.Sprintf("l%02d", i)] = strings.Repeat("x", 1000)
	}
	for i := range 20 {
		m := big.Put("proc-3", fmt.Sprintf("o%02d", i), []byte(`1`))
		m.Labels = labels
		big.Metas[m.OID] = m
	}
	out, e := call(t, big, "list_objects", `{}`)
	if e != nil {
		t.Fatal(e)
	}
	listed := out["objects"].([]map[string]any)
	if encoded, _ := json.Marshal(out); len(listed) == 0 || len(listed) >= 20 || out["has_more"] != true ||
		out["next_after"] != listed[len(listed)-1]["name"] || len(encoded) > MaxListBytes+4096 {
		t.Fatalf("a page of large metadata: %d listed, has_more %v, next_after %v, %d bytes", len(listed), out["has_more"], out["next_after"], len(encoded))
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

// A read or write an ask grant covers is held for a Human, as create and
// list are: the refusal reaches the kernel as approval required, never as
// the hidden denial of a missing Object. Approved, it runs; a deny stays
// hidden.
func TestAskGrantHoldsReadsAndWrites(t *testing.T) {
	sys := toolstest.New(2,
		grant("object_namespace:proc-2", capabilities.Read),
		capabilities.Grant{ID: "ask-write", Resource: "object_namespace:*", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Ask},
		capabilities.Grant{ID: "ask-read", Resource: "object_namespace:shared", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask})
	mine := sys.Put("proc-2", "mine", []byte(`1`))
	shared := sys.Put("shared", "doc", []byte(`"s"`))
	held := []struct{ tool, args string }{
		{"write_object", `{"oid":"` + mine.OID + `","expected_version":1,"payload":2}`},
		{"read_object", `{"oid":"` + shared.OID + `"}`},
		{"read_object", `{"namespace":"shared","name":"doc"}`},
		// Missing, by name: the namespace's ask grant covers it.
		{"read_object", `{"namespace":"shared","name":"nothing"}`},
		{"create_object", `{"name":"n","payload":1}`},
	}
	for _, c := range held {
		_, e := call(t, sys, c.tool, c.args)
		if e == nil || !errors.Is(e, tools.ErrApprovalRequired) || strings.Contains(e.Message, "does not exist") {
			t.Fatalf("%s %s under an ask grant: %v, want approval required", c.tool, c.args, e)
		}
	}
	if v := sys.Metas[mine.OID].Version; v != 1 {
		t.Fatalf("a held write changed the Object: version %d", v)
	}
	sys.Approved = true
	if out, e := call(t, sys, "write_object", `{"oid":"`+mine.OID+`","expected_version":1,"payload":2}`); e != nil || out["version"] != uint64(2) {
		t.Fatalf("approved write: %v %v", out, e)
	}
	if out, e := call(t, sys, "read_object", `{"oid":"`+shared.OID+`"}`); e != nil || out["oid"] != shared.OID {
		t.Fatalf("approved read: %v %v", out, e)
	}
	// A deny beats the ask and still reads as a missing Object.
	sys.Approved = false
	sys.Grants = append(sys.Grants, capabilities.Grant{Resource: "object:" + shared.OID, Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Deny})
	if _, e := call(t, sys, "read_object", `{"oid":"`+shared.OID+`"}`); e == nil || errors.Is(e, tools.ErrApprovalRequired) || !strings.Contains(e.Message, "does not exist") {
		t.Fatalf("denied read: %v", e)
	}
}

// Labels are bounded in count, key and value bytes, named in the refusal,
// for create and write alike: they are kept in durable metadata whatever
// the payload's tier, outside the payload's bound.
func TestLabelsAreBounded(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read, capabilities.Write))
	labels := func(n, valueBytes int) string {
		m := map[string]string{}
		for i := 0; i < n; i++ {
			m[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", valueBytes)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	if _, e := call(t, sys, "create_object", `{"name":"full","payload":1,"labels":`+labels(objects.MaxLabels, objects.MaxLabelValueLen)+`}`); e != nil {
		t.Fatalf("labels at the bounds: %v", e)
	}
	out, e := call(t, sys, "create_object", `{"name":"ok","payload":1}`)
	if e != nil {
		t.Fatal(e)
	}
	oid := out["oid"].(string)
	bad := []struct{ labels, want string }{
		{`{"big":"` + strings.Repeat("<", 3<<20) + `"}`, `labels["big"]: value must be at most 1024 bytes, got 3145728`},
		{`{"k":"` + strings.Repeat("é", 513) + `"}`, `labels["k"]: value must be at most 1024 bytes, got 1026`},
		{labels(objects.MaxLabels+1, 1), "labels: must have at most 64 labels, got 65"},
		{`{"` + strings.Repeat("k", 257) + `":"v"}`, "must be at most 256 bytes (UTF-8), got 257"},
		{`{"a\u0000b":"v"}`, `labels key "a\x00b": must not contain NUL bytes`},
		{`{"":"v"}`, "labels: a key must not be empty"},
	}
	for _, c := range bad {
		for _, args := range []string{
			`{"name":"n","payload":1,"labels":` + c.labels + `}`,
			`{"oid":"` + oid + `","expected_version":1,"payload":1,"labels":` + c.labels + `}`,
		} {
			tool := "create_object"
			if strings.HasPrefix(args, `{"oid"`) {
				tool = "write_object"
			}
			if _, e := call(t, sys, tool, args); e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, c.want) {
				t.Errorf("%s with labels %.60s: %v, want invalid_arguments with %q", tool, c.labels, e, c.want)
			}
		}
	}
	if _, err := sys.LookupObject("proc-2", "n"); err == nil || sys.Metas[oid].Version != 1 {
		t.Fatal("a refused call reached the store")
	}
}

// The schemas count characters, the store bytes: a namespace or name the
// store would refuse (over 256 bytes, or holding a NUL) is refused as
// invalid_arguments naming the field and the rule in bytes, before
// anything else is looked at.
func TestNamesAreBoundedInBytes(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:*", capabilities.Read, capabilities.Write))
	euros := strings.Repeat("€", 100) // 100 characters, 300 bytes
	bad := []struct{ tool, args, want string }{
		{"create_object", `{"name":"` + euros + `","payload":1}`, "name: must be at most 256 bytes (UTF-8), got 300"},
		{"create_object", `{"namespace":"` + euros + `","name":"n","payload":1}`, "namespace: must be at most 256 bytes (UTF-8), got 300"},
		{"create_object", `{"name":"a\u0000b","payload":1}`, "name: must not contain NUL bytes"},
		{"create_object", `{"name":"n","kind":"a\u0000b","payload":1}`, "kind: must not contain NUL bytes"},
		{"read_object", `{"namespace":"proc-2","name":"` + euros + `"}`, "name: must be at most 256 bytes (UTF-8), got 300"},
		{"read_object", `{"namespace":"a\u0000b","name":"n"}`, "namespace: must not contain NUL bytes"},
		{"list_objects", `{"namespace":"` + euros + `"}`, "namespace: must be at most 256 bytes (UTF-8), got 300"},
	}
	for _, c := range bad {
		if _, e := call(t, sys, c.tool, c.args); e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s %.80s: %v, want invalid_arguments with %q", c.tool, c.args, e, c.want)
		}
	}
	if len(sys.Metas) != 0 {
		t.Fatal("a refused create reached the store")
	}
	// 256 bytes is within the bound, whatever the characters.
	name := strings.Repeat("€", 85) + "x" // 256 bytes
	if _, e := call(t, sys, "create_object", `{"name":"`+name+`","payload":1}`); e != nil {
		t.Fatalf("a 256-byte name: %v", e)
	}
}

// Payloads are kept as sent: <, > and & are not escaped into six bytes
// each, so a payload within the bound is accepted and stored as written.
func TestPayloadKeepsHTMLCharacters(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:proc-2", capabilities.Read, capabilities.Write))
	big := `"` + strings.Repeat("<", 200000) + `"`
	out, e := call(t, sys, "create_object", `{"name":"big","payload":`+big+`}`)
	if e != nil || out["payload_bytes"] != len(big) {
		t.Fatalf("200,000 '<': %v %v", out, e)
	}
	out, e = call(t, sys, "create_object", `{"name":"amp","payload":"a\u0026b<c>"}`)
	if e != nil {
		t.Fatal(e)
	}
	if got := string(sys.Payloads[out["oid"].(string)]); got != `"a&b<c>"` {
		t.Fatalf("stored %s, want \"a&b<c>\"", got)
	}
}

// answers renders a failed call's code and message with the identifier the
// caller gave replaced, so two probes compare as the caller sees them.
func answers(e *tools.Error, id string) string {
	if e == nil {
		return "ok"
	}
	return e.Code + ": " + strings.ReplaceAll(e.Message, id, "ID")
}

// An Object the caller may not read answers every probe exactly as a
// missing one does for that caller: not_found where a missing target is
// reported not_found to it (it may read the namespace, or object:*), the
// hidden denial where it is not. A found Object's existence never shows
// through a different code or message.
func TestForbiddenObjectsAnswerAsMissingOnes(t *testing.T) {
	const missingOID = "00000000-0000-4000-8000-000000000000"
	deny := func(resource string, rights ...capabilities.Right) capabilities.Grant {
		return capabilities.Grant{Resource: resource, Rights: rights, Effect: capabilities.Deny}
	}
	cases := []struct {
		name   string
		grants func(secret string) []capabilities.Grant
		// tool and args for the secret and for a missing target; args hold
		// ID where the identifier goes.
		tool, args, secretID, missingID string
		code                            string
	}{
		{"by name, namespace readable, Object denied", func(s string) []capabilities.Grant {
			return []capabilities.Grant{grant("object_namespace:shared", capabilities.Read), deny("object:"+s, capabilities.Read)}
		}, "read_object", `{"namespace":"shared","name":"ID"}`, "secret", "nope", tools.CodeNotFound},
		{"by name, namespace denied, Object allowed", func(s string) []capabilities.Grant {
			return []capabilities.Grant{grant("object:"+s, capabilities.Read), deny("object_namespace:shared", capabilities.Read)}
		}, "read_object", `{"namespace":"shared","name":"ID"}`, "secret", "nope", tools.CodeDenied},
		{"by oid, object:* allowed, namespace denied", func(string) []capabilities.Grant {
			return []capabilities.Grant{grant("object:*", capabilities.Read), deny("object_namespace:shared", capabilities.Read)}
		}, "read_object", `{"oid":"ID"}`, "", missingOID, tools.CodeNotFound},
		{"by oid, namespace readable, Object denied", func(s string) []capabilities.Grant {
			return []capabilities.Grant{grant("object_namespace:shared", capabilities.Read), deny("object:"+s, capabilities.Read)}
		}, "read_object", `{"oid":"ID"}`, "", missingOID, tools.CodeDenied},
		{"write by oid, object:* allowed, namespace denied", func(string) []capabilities.Grant {
			return []capabilities.Grant{grant("object:*", capabilities.Write), deny("object_namespace:shared", capabilities.Write)}
		}, "write_object", `{"oid":"ID","expected_version":1,"payload":0}`, "", missingOID, tools.CodeNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sys := toolstest.New(2)
			secret := sys.Put("shared", "secret", []byte(`"s"`))
			sys.Grants = c.grants(secret.OID)
			secretID := c.secretID
			if secretID == "" {
				secretID = secret.OID
			}
			_, e1 := call(t, sys, c.tool, strings.ReplaceAll(c.args, "ID", secretID))
			_, e2 := call(t, sys, c.tool, strings.ReplaceAll(c.args, "ID", c.missingID))
			a1, a2 := answers(e1, secretID), answers(e2, c.missingID)
			if a1 != a2 || e1 == nil || e1.Code != c.code {
				t.Fatalf("the secret and a missing target answer differently (want %s):\n secret:  %s\n missing: %s", c.code, a1, a2)
			}
			if strings.Contains(e1.Message, secret.OID) && secretID != secret.OID {
				t.Fatalf("the answer names the secret's OID: %s", e1.Message)
			}
			if m := sys.Metas[secret.OID]; m.Version != 1 {
				t.Fatalf("a refused call changed the secret: version %d", m.Version)
			}
		})
	}
}

// create_object tells a caller a name is taken only if it may read the
// namespace: a writer that may not is refused every create there with one
// answer, whatever the name, so a collision never tells it an Object
// exists. A reader is told; an ask grant on the read holds the create for a
// Human, and an approved create runs.
func TestCreateTellsOnlyAReaderANameIsTaken(t *testing.T) {
	sys := toolstest.New(2, grant("object_namespace:shared", capabilities.Write))
	secret := sys.Put("shared", "secret", []byte(`"s"`))
	sys.Grants = append(sys.Grants, capabilities.Grant{Resource: "object:" + secret.OID, Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Deny})
	_, e1 := call(t, sys, "create_object", `{"namespace":"shared","name":"secret","payload":1}`)
	_, e2 := call(t, sys, "create_object", `{"namespace":"shared","name":"fresh","payload":1}`)
	if a1, a2 := answers(e1, "secret"), answers(e2, "fresh"); a1 != a2 || e1 == nil || e1.Code != tools.CodeDenied ||
		!strings.Contains(e1.Message, "namespace: ") || !strings.Contains(e1.Message, "read on object_namespace:shared") {
		t.Fatalf("a writer without read: a taken name and a fresh one answer\n taken: %s\n fresh: %s\nwant the same denial naming the rule", a1, a2)
	}
	if _, err := sys.LookupObject("shared", "fresh"); err == nil || len(sys.Metas) != 1 {
		t.Fatal("a refused create reached the store")
	}

	reader := toolstest.New(2, grant("object_namespace:shared", capabilities.Read, capabilities.Write))
	reader.Put("shared", "taken", []byte(`1`))
	if _, e := call(t, reader, "create_object", `{"namespace":"shared","name":"taken","payload":1}`); e == nil || e.Code != tools.CodeInvalidArguments ||
		!strings.HasPrefix(e.Message, `name: "taken" is already taken in namespace shared`) || !errors.Is(e, objects.ErrNameTaken) {
		t.Fatalf("a reader's collision: %v", e)
	}
	if out, e := call(t, reader, "create_object", `{"namespace":"shared","name":"fresh","payload":1}`); e != nil || out["name"] != "fresh" {
		t.Fatalf("a reader's create: %v %v", out, e)
	}

	asker := toolstest.New(2, grant("object_namespace:shared", capabilities.Write),
		capabilities.Grant{ID: "ask-read", Resource: "object_namespace:shared", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask})
	if _, e := call(t, asker, "create_object", `{"namespace":"shared","name":"fresh","payload":1}`); e == nil || !errors.Is(e, tools.ErrApprovalRequired) {
		t.Fatalf("a create whose read asks: %v, want it held for approval", e)
	}
	asker.Approved = true
	if out, e := call(t, asker, "create_object", `{"namespace":"shared","name":"fresh","payload":1}`); e != nil || out["name"] != "fresh" {
		t.Fatalf("the approved create: %v %v", out, e)
	}
}

// A writer that may not read an Object learns from write_object only what
// it knows already: the OID, the version its write made, the hash of the
// payload it sent. A failed compare-and-swap does not name the current
// version. A reader sees the metadata read_object shows, and the current
// version of a conflict. An ask grant on the read is never asked: the
// write is not held for it, and shows no more.
func TestWriteShowsMetadataOnlyToAReader(t *testing.T) {
	withheld := []string{"labels", "name", "namespace", "kind", "tier", "payload_bytes", "payload_lost"}
	for _, c := range []struct {
		name string
		read capabilities.Grant
	}{
		{"denied", capabilities.Grant{Resource: "object:OID", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Deny}},
		{"no grant", capabilities.Grant{Resource: "object_namespace:elsewhere", Rights: []capabilities.Right{capabilities.Read}}},
		{"asks", capabilities.Grant{Resource: "object:OID", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := toolstest.New(2)
			secret := sys.Put("shared", "salary", []byte(`1`))
			m := sys.Metas[secret.OID]
			m.Labels, m.Version = map[string]string{"owner": "cfo"}, 6
			sys.Metas[secret.OID] = m
			c.read.Resource = strings.ReplaceAll(c.read.Resource, "OID", secret.OID)
			sys.Grants = []capabilities.Grant{grant("object:"+secret.OID, capabilities.Write), c.read}
			out, e := call(t, sys, "write_object", `{"oid":"`+secret.OID+`","expected_version":6,"payload":2}`)
			if e != nil {
				t.Fatalf("write: %v", e)
			}
			if out["oid"] != secret.OID || out["version"] != uint64(7) || out["payload_sha256"] != sys.Metas[secret.OID].PayloadSHA256 || out["payload_sha256"] == "" {
				t.Fatalf("write result %v, want the oid, version 7 and the payload's hash", out)
			}
			for _, k := range withheld {
				if _, ok := out[k]; ok {
					t.Errorf("write result shows %s to a writer that may not read: %v", k, out)
				}
			}
			_, e = call(t, sys, "write_object", `{"oid":"`+secret.OID+`","expected_version":1,"payload":3}`)
			if e == nil || e.Code != tools.CodeConflict || !errors.Is(e, objects.ErrConflict) || strings.Contains(e.Message, "version 7") ||
				!strings.HasPrefix(e.Message, "expected_version: ") {
				t.Fatalf("stale write: %v, want a conflict naming expected_version and not the current version", e)
			}
		})
	}

	sys := toolstest.New(2, grant("object_namespace:shared", capabilities.Read, capabilities.Write))
	doc := sys.Put("shared", "doc", []byte(`1`))
	out, e := call(t, sys, "write_object", `{"oid":"`+doc.OID+`","expected_version":1,"payload":2,"labels":{"k":"v"}}`)
	if e != nil || out["name"] != "doc" || out["namespace"] != "shared" || out["labels"].(map[string]string)["k"] != "v" || out["metadata_withheld"] != nil {
		t.Fatalf("a reader's write: %v %v, want the Object's metadata", out, e)
	}
	if _, e := call(t, sys, "write_object", `{"oid":"`+doc.OID+`","expected_version":1,"payload":3}`); e == nil || e.Code != tools.CodeConflict ||
		!strings.Contains(e.Message, "version 2") || !strings.HasPrefix(e.Message, "expected_version: ") {
		t.Fatalf("a reader's stale write: %v, want the current version named", e)
	}
}
