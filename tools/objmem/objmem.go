// Package objmem holds the Object memory tools: create_object, read_object,
// write_object and list_objects.
package objmem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// MaxPayloadBytes bounds an Object payload written through a tool.
const MaxPayloadBytes = 1 << 20

// Tools returns the Object memory family.
func Tools(tools.Config) []*tools.Tool {
	return []*tools.Tool{createObject(), readObject(), writeObject(), listObjects()}
}

// objectSys is what the Object tools use: the caller's authority and the store.
type objectSys interface {
	tools.Caller
	tools.ObjectStore
}

// lookupAuthorized finds namespace/name and checks right on it, with the
// same answer for a missing Object and a forbidden one.
func lookupAuthorized(sys objectSys, op authority.Op, namespace, name string) (objects.Meta, error) {
	target := fmt.Sprintf("object_namespace:%s (name %q)", namespace, name)
	meta, err := sys.LookupObject(namespace, name)
	switch {
	case errors.Is(err, objects.ErrNotFound):
		if sys.Require(op, authority.Params{Namespace: namespace}) != nil {
			return objects.Meta{}, tools.HiddenDenial(op, target)
		}
		return objects.Meta{}, err
	case err != nil:
		return objects.Meta{}, err
	}
	if sys.Require(op, authority.Params{OID: meta.OID, Namespace: meta.Namespace}) != nil {
		return objects.Meta{}, tools.HiddenDenial(op, target)
	}
	return meta, nil
}

func metaResult(m objects.Meta) map[string]any {
	labels := m.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return map[string]any{
		"oid": m.OID, "namespace": m.Namespace, "name": m.Name, "kind": m.Kind, "version": m.Version,
		"labels": labels, "tier": string(m.Tier), "payload_bytes": m.PayloadBytes, "payload_sha256": m.PayloadSHA256,
		"payload_lost": m.PayloadLost,
	}
}

func decode(name string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: decode arguments: %w", name, err)
	}
	return nil
}

func checkPayload(p json.RawMessage) error {
	if len(p) > MaxPayloadBytes {
		return tools.Errorf(tools.CodeInvalidArguments, "payload: at most %d bytes (got %d)", MaxPayloadBytes, len(p))
	}
	return nil
}

var labelsSchema = &schema.Schema{Type: "object", Description: "String labels."}

func decodeLabels(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var labels map[string]string
	if err := json.Unmarshal(raw, &labels); err != nil {
		return nil, tools.Errorf(tools.CodeInvalidArguments, "labels: must map names to strings")
	}
	return labels, nil
}

func createObject() *tools.Tool {
	return &tools.Tool{
		Name: "create_object",
		Description: "Create a versioned Object (version 1). Needs write on object_namespace:<namespace> (default: your own). Payloads are " +
			"runtime-local unless durable=true: a runtime-local payload does not survive a reopen.",
		Schema: schema.Object(map[string]*schema.Schema{
			"namespace": {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(256)},
			"name":      {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(256)},
			"kind":      {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64), Default: "data"},
			"payload":   {Description: "Any JSON value."},
			"labels":    labelsSchema,
			"durable":   {Type: "boolean", Default: false},
		}, "name", "payload"),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return createObj(sys, raw)
		},
	}
}

func createObj(sys objectSys, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		Namespace string          `json:"namespace"`
		Name      string          `json:"name"`
		Kind      string          `json:"kind"`
		Payload   json.RawMessage `json:"payload"`
		Labels    json.RawMessage `json:"labels"`
		Durable   bool            `json:"durable"`
	}
	if err := decode("create_object", raw, &args); err != nil {
		return tools.Outcome{}, err
	}
	if args.Namespace == "" {
		args.Namespace = sys.Self().Namespace
	}
	labels, err := decodeLabels(args.Labels)
	if err != nil {
		return tools.Outcome{}, err
	}
	if err := checkPayload(args.Payload); err != nil {
		return tools.Outcome{}, err
	}
	if err := sys.Require(authority.ObjectCreate, authority.Params{Namespace: args.Namespace}); err != nil {
		return tools.Outcome{}, err
	}
	tier := objects.TierRuntimeLocal
	if args.Durable {
		tier = objects.TierDurable
	}
	m, err := sys.CreateObject(objects.CreateSpec{
		Namespace: args.Namespace, Name: args.Name, Kind: args.Kind, Owner: fmt.Sprint(sys.Self().PID),
		Labels: labels, Tier: tier, Payload: args.Payload,
	})
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: metaResult(m)}, nil
}

func readObject() *tools.Tool {
	return &tools.Tool{
		Name:        "read_object",
		Description: "Read an Object by oid, or by namespace and name. Needs read on the Object or its namespace. A runtime-local payload from before a reopen is reported as lost, never as empty.",
		Schema: schema.Object(map[string]*schema.Schema{
			"oid":       {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64)},
			"namespace": {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(256)},
			"name":      {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(256)},
		}),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return readObj(sys, raw)
		},
	}
}

func readObj(sys objectSys, raw json.RawMessage) (tools.Outcome, error) {
	var args struct{ OID, Namespace, Name string }
	if err := decode("read_object", raw, &args); err != nil {
		return tools.Outcome{}, err
	}
	var meta objects.Meta
	var err error
	switch {
	case args.OID != "" && (args.Namespace != "" || args.Name != ""):
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "oid: give either oid, or namespace and name, not both")
	case args.OID != "":
		meta, err = tools.StatAuthorized(sys, authority.ObjectRead, args.OID)
	case args.Namespace != "" && args.Name != "":
		meta, err = lookupAuthorized(sys, authority.ObjectRead, args.Namespace, args.Name)
	default:
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "oid: required unless namespace and name are both given")
	}
	if err != nil {
		return tools.Outcome{}, err
	}
	_, payload, err := sys.ReadObject(meta.OID)
	out := metaResult(meta)
	switch {
	case errors.Is(err, objects.ErrPayloadLost):
		return tools.Outcome{}, tools.Errorf(tools.CodeNotFound, "object %s version %d: %v", meta.OID, meta.Version, err)
	case err != nil:
		return tools.Outcome{}, err
	case json.Valid(payload):
		out["payload"] = json.RawMessage(payload)
	default:
		out["payload_text"] = string(payload)
	}
	return tools.Outcome{Result: out}, nil
}

func writeObject() *tools.Tool {
	return &tools.Tool{
		Name:        "write_object",
		Description: "Replace an Object's payload with compare-and-swap: expected_version must be the version you read, or nothing changes and a conflict is returned. Needs write on the Object or its namespace.",
		Schema: schema.Object(map[string]*schema.Schema{
			"oid":              {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64)},
			"expected_version": {Type: "integer", Minimum: schema.Ptr(1.0)},
			"payload":          {Description: "Any JSON value."},
			"labels":           labelsSchema,
		}, "oid", "expected_version", "payload"),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return writeObj(sys, raw)
		},
	}
}

func writeObj(sys objectSys, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		OID             string          `json:"oid"`
		ExpectedVersion uint64          `json:"expected_version"`
		Payload         json.RawMessage `json:"payload"`
		Labels          json.RawMessage `json:"labels"`
	}
	if err := decode("write_object", raw, &args); err != nil {
		return tools.Outcome{}, err
	}
	labels, err := decodeLabels(args.Labels)
	if err != nil {
		return tools.Outcome{}, err
	}
	if err := checkPayload(args.Payload); err != nil {
		return tools.Outcome{}, err
	}
	if _, err := tools.StatAuthorized(sys, authority.ObjectWrite, args.OID); err != nil {
		return tools.Outcome{}, err
	}
	m, err := sys.WriteObject(args.OID, args.ExpectedVersion, objects.WriteSpec{Payload: args.Payload, Labels: labels})
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: metaResult(m)}, nil
}

func listObjects() *tools.Tool {
	return &tools.Tool{
		Name:        "list_objects",
		Description: "List the Objects of a namespace (default: your own) by name, metadata only. Needs read on object_namespace:<namespace>.",
		Schema: schema.Object(map[string]*schema.Schema{
			"namespace": {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(256)},
		}),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return listObj(sys, raw)
		},
	}
}

func listObj(sys objectSys, raw json.RawMessage) (tools.Outcome, error) {
	var args struct{ Namespace string }
	if err := decode("list_objects", raw, &args); err != nil {
		return tools.Outcome{}, err
	}
	if args.Namespace == "" {
		args.Namespace = sys.Self().Namespace
	}
	if err := sys.Require(authority.ObjectList, authority.Params{Namespace: args.Namespace}); err != nil {
		return tools.Outcome{}, err
	}
	metas, err := sys.ListObjects(args.Namespace)
	if err != nil {
		return tools.Outcome{}, err
	}
	list := make([]map[string]any, 0, len(metas))
	for _, m := range metas {
		list = append(list, metaResult(m))
	}
	return tools.Outcome{Result: map[string]any{"namespace": args.Namespace, "objects": list}}, nil
}
