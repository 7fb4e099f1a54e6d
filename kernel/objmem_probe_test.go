package kernel

import (
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/tools"
)

// The Object the probes look for, shared/salary, and an OID no Object has.
const (
	probeSecret  = "11111111-2222-4333-8444-777777777777"
	probeMissing = "11111111-2222-4333-8444-888888888888"
)

// probe runs one process holding grants through calls (a YAML list of tool
// calls, one batch) against a store holding shared/salary, labelled, and
// returns its tool results.
func probe(t *testing.T, grants []capabilities.Grant, calls string) []map[string]any {
	t.Helper()
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
`+calls+`
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	sharedObject(t, h, objects.CreateSpec{OID: probeSecret, Name: "salary", Kind: "ledger", Labels: map[string]string{"owner": "cfo"}, Payload: []byte("123456")})
	pid := h.spawn(grants)
	h.run()
	return h.toolResults(pid)
}

// sameAnswer fails unless two probes, for the secret and for a missing
// target, fail with code and one message but for the identifier given.
func sameAnswer(t *testing.T, what string, secret, missing map[string]any, secretID, missingID, code string) {
	t.Helper()
	m1 := strings.ReplaceAll(errorMessage(secret), secretID, "ID")
	m2 := strings.ReplaceAll(errorMessage(missing), missingID, "ID")
	if errorCode(secret) != code || errorCode(missing) != code || m1 != m2 {
		t.Fatalf("%s: the secret and a missing target answer differently, want both %s:\n secret:  %v\n missing: %v", what, code, secret, missing)
	}
	if strings.Contains(errorMessage(secret), probeSecret) && secretID != probeSecret {
		t.Fatalf("%s: the answer names the secret's OID: %v", what, secret)
	}
}

// By name: a caller that may read the namespace but is denied the Object
// is told it is not found, as it is told of a name nothing has; list_objects
// already leaves it out.
func TestProbeByNameAnswersAsMissing(t *testing.T) {
	res := probe(t, []capabilities.Grant{
		objectGrant("object_namespace:shared", capabilities.Allow, capabilities.Read),
		objectGrant("object:"+probeSecret, capabilities.Deny, capabilities.Read),
	}, `
          - {name: read_object, arguments: {namespace: shared, name: salary}}
          - {name: read_object, arguments: {namespace: shared, name: nope}}`)
	sameAnswer(t, "read_object by name", res[0], res[1], `"salary"`, `"nope"`, tools.CodeNotFound)
}

// By OID: a caller that may read object:* but is denied the namespace that
// holds the Object is told it is not found, as it is told of an OID nothing
// has; the answer does not name the namespace.
func TestProbeByOIDAnswersAsMissing(t *testing.T) {
	res := probe(t, []capabilities.Grant{
		objectGrant("object:*", capabilities.Allow, capabilities.Read, capabilities.Write),
		objectGrant("object_namespace:shared", capabilities.Deny, capabilities.Read, capabilities.Write),
	}, `
          - {name: read_object, arguments: {oid: "`+probeSecret+`"}}
          - {name: read_object, arguments: {oid: "`+probeMissing+`"}}
          - {name: write_object, arguments: {oid: "`+probeSecret+`", expected_version: 1, payload: 0}}
          - {name: write_object, arguments: {oid: "`+probeMissing+`", expected_version: 1, payload: 0}}`)
	sameAnswer(t, "read_object by oid", res[0], res[1], probeSecret, probeMissing, tools.CodeNotFound)
	sameAnswer(t, "write_object", res[2], res[3], probeSecret, probeMissing, tools.CodeNotFound)
	if strings.Contains(errorMessage(res[0]), "shared") {
		t.Fatalf("the answer names the namespace: %v", res[0])
	}
}

// By create: a caller that may write the namespace but not read it is
// refused every create there alike, so a name the secret holds answers as a
// free one does; nothing is created.
func TestProbeByCreateAnswersAlike(t *testing.T) {
	res := probe(t, []capabilities.Grant{
		objectGrant("object_namespace:shared", capabilities.Allow, capabilities.Write),
		objectGrant("object:"+probeSecret, capabilities.Deny, capabilities.Read),
	}, `
          - {name: create_object, arguments: {namespace: shared, name: salary, payload: 1}}
          - {name: create_object, arguments: {namespace: shared, name: fresh, payload: 1}}
          - {name: list_objects, arguments: {}}`)
	sameAnswer(t, "create_object", res[0], res[1], `salary`, `fresh`, tools.CodeDenied)
	if !strings.Contains(errorMessage(res[0]), "read on object_namespace:shared") {
		t.Fatalf("the refusal does not name the rule: %v", res[0])
	}
}

// A writer denied reading an Object learns from write_object only the OID,
// its new version and its payload's hash; a failed compare-and-swap does not
// name the current version. A reader is shown the metadata, as read_object
// shows it.
func TestWriteObjectShowsAWriterOnlyWhatItKnows(t *testing.T) {
	res := probe(t, []capabilities.Grant{
		objectGrant("object:"+probeSecret, capabilities.Allow, capabilities.Write),
		objectGrant("object:"+probeSecret, capabilities.Deny, capabilities.Read),
	}, `
          - {name: write_object, arguments: {oid: "`+probeSecret+`", expected_version: 1, payload: 2}}
          - {name: write_object, arguments: {oid: "`+probeSecret+`", expected_version: 1, payload: 3}}
          - {name: read_object, arguments: {oid: "`+probeSecret+`"}}`)
	w := res[0]
	if w["ok"] != true || w["oid"] != probeSecret || w["version"] != float64(2) || w["payload_sha256"] == nil {
		t.Fatalf("write: %v, want the oid, version 2 and the payload's hash", w)
	}
	for _, k := range []string{"labels", "name", "namespace", "kind", "tier", "payload_bytes"} {
		if _, ok := w[k]; ok {
			t.Errorf("write shows %s to a writer denied reading: %v", k, w)
		}
	}
	if errorCode(res[1]) != tools.CodeConflict || strings.Contains(errorMessage(res[1]), "version 2") {
		t.Fatalf("stale write: %v, want a conflict not naming the current version", res[1])
	}
	if errorCode(res[2]) != tools.CodeDenied {
		t.Fatalf("read: %v, want it refused", res[2])
	}

	res = probe(t, []capabilities.Grant{
		objectGrant("object_namespace:shared", capabilities.Allow, capabilities.Read, capabilities.Write),
	}, `
          - {name: write_object, arguments: {oid: "`+probeSecret+`", expected_version: 1, payload: 2}}
          - {name: write_object, arguments: {oid: "`+probeSecret+`", expected_version: 1, payload: 3}}`)
	labels, _ := res[0]["labels"].(map[string]any)
	if res[0]["name"] != "salary" || res[0]["kind"] != "ledger" || labels["owner"] != "cfo" {
		t.Fatalf("a reader's write: %v, want the Object's metadata", res[0])
	}
	if errorCode(res[1]) != tools.CodeConflict || !strings.Contains(errorMessage(res[1]), "current version 2") {
		t.Fatalf("a reader's stale write: %v, want the current version named", res[1])
	}
}
