// Package objmem holds the Object memory tools: create_object, read_object,
// write_object and list_objects.
package objmem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
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

// lookupAuthorized finds namespace/name and checks op on it. An Object the
// caller may not reach answers exactly as a missing name does for that
// caller (tools.Missing): not_found when it may read the namespace, the
// hidden denial when it may not. A deny on object:<oid> so hides the
// Object's name, as list_objects does. A call an ask grant covers is held
// for approval.
func lookupAuthorized(sys objectSys, op authority.Op, namespace, name string) (objects.Meta, error) {
	missing := func() error {
		return tools.Missing(sys, op, authority.Params{Namespace: namespace}, fmt.Sprintf("object_namespace:%s (name %q)", namespace, name),
			fmt.Errorf("name: %q in namespace %s: %w", name, namespace, objects.ErrNotFound))
	}
	meta, err := sys.LookupObject(namespace, name)
	switch {
	case errors.Is(err, objects.ErrNotFound):
		return objects.Meta{}, missing()
	case err != nil:
		return objects.Meta{}, err
	}
	if err := sys.Require(op, authority.Params{OID: meta.OID, Namespace: meta.Namespace}); err != nil {
		if errors.Is(err, tools.ErrApprovalRequired) {
			return objects.Meta{}, err
		}
		return objects.Meta{}, missing()
	}
	return meta, nil
}

// readable reports whether the caller may read p now, reserving nothing and
// asking no one: an allow grant decides it (Holding). An ask grant does not
// count, since only a Human's approval of a read would let it show.
func readable(sys tools.Caller, p authority.Params) bool {
	g, ok := sys.Holding(authority.ObjectRead, p)
	return ok && g.Effect != capabilities.Ask
}

// writeResult is what a write shows a caller that may not read the Object:
// what it knows already (the OID it gave, the version its expected_version
// makes, the hash of the payload it sent), none of the metadata read_object
// would refuse it.
func writeResult(m objects.Meta) map[string]any {
	return map[string]any{"oid": m.OID, "version": m.Version, "payload_sha256": m.PayloadSHA256,
		"metadata_withheld": "you may not read this Object: its other metadata is shown only to a reader"}
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

var labelsSchema = &schema.Schema{Type: "object", Description: fmt.Sprintf(
	"String labels: at most %d, each key 1 to %d bytes, each value at most %d bytes (UTF-8), no NUL bytes in keys.",
	objects.MaxLabels, objects.MaxIdentLen, objects.MaxLabelValueLen)}

// decodeLabels decodes and bounds labels as the store does (objects'
// MaxLabels, MaxIdentLen, MaxLabelValueLen), naming the label at fault:
// labels are kept in durable metadata whatever the payload's tier, so the
// payload's bound does not cover them. Keys are checked in order, so the
// label named is the same on every try.
func decodeLabels(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var labels map[string]string
	if err := json.Unmarshal(raw, &labels); err != nil {
		return nil, tools.Errorf(tools.CodeInvalidArguments, "labels: must map names to strings")
	}
	if len(labels) > objects.MaxLabels {
		return nil, tools.Errorf(tools.CodeInvalidArguments, "labels: must have at most %d labels, got %d", objects.MaxLabels, len(labels))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k == "" {
			return nil, tools.Errorf(tools.CodeInvalidArguments, "labels: a key must not be empty")
		}
		if err := checkIdent(fmt.Sprintf("labels key %q", k), k); err != nil {
			return nil, err
		}
		if v := labels[k]; len(v) > objects.MaxLabelValueLen {
			return nil, tools.Errorf(tools.CodeInvalidArguments, "labels[%q]: value must be at most %d bytes, got %d", k, objects.MaxLabelValueLen, len(v))
		}
	}
	return labels, nil
}

// checkIdent refuses a namespace, name, kind or label key the store would
// refuse: the schema's maxLength counts characters, while the store bounds
// bytes (objects.MaxIdentLen) and refuses NUL bytes, which separate
// namespace and name in its index. Checked here, the refusal names the
// argument and the rule in bytes.
func checkIdent(field, v string) error {
	switch {
	case len(v) > objects.MaxIdentLen:
		return tools.Errorf(tools.CodeInvalidArguments, "%s: must be at most %d bytes (UTF-8), got %d", field, objects.MaxIdentLen, len(v))
	case strings.IndexByte(v, 0) >= 0:
		return tools.Errorf(tools.CodeInvalidArguments, "%s: must not contain NUL bytes", field)
	}
	return nil
}

// checkIdents checks each named argument that is given ("" is absent).
func checkIdents(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			continue
		}
		if err := checkIdent(fields[i], fields[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// identSchema is a namespace's or a name's schema. Its maxLength counts
// characters, which lets through up to four times as many bytes; checkIdent
// holds the argument to the store's bound in bytes.
func identSchema() *schema.Schema {
	return &schema.Schema{Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(objects.MaxIdentLen),
		Description: fmt.Sprintf("At most %d bytes (UTF-8), no NUL bytes.", objects.MaxIdentLen)}
}

func createObject() *tools.Tool {
	return &tools.Tool{
		Name: "create_object",
		Description: "Create a versioned Object (version 1). Needs write and read on object_namespace:<namespace> (default: your own). Payloads are " +
			"runtime-local unless durable=true: a runtime-local payload does not survive a reopen.",
		Schema: schema.Object(map[string]*schema.Schema{
			"namespace": identSchema(),
			"name":      identSchema(),
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
	if err := checkIdents("namespace", args.Namespace, "name", args.Name, "kind", args.Kind); err != nil {
		return tools.Outcome{}, err
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
	if err := mayReadNamespace(sys, args.Namespace); err != nil {
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
	if errors.Is(err, objects.ErrNameTaken) {
		return tools.Outcome{}, &tools.Error{Code: tools.CodeInvalidArguments, Err: err,
			Message: fmt.Sprintf("name: %q is already taken in namespace %s; choose another name", args.Name, args.Namespace)}
	}
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: metaResult(m)}, nil
}

// mayReadNamespace is create_object's second rule: a name taken in a
// namespace tells of an Object there, so only a caller that may read the
// namespace (whose read_object of a missing name answers not_found) is told
// a name is taken; any other caller is refused every create there, whatever
// the name, so the refusal tells nothing of what exists. Nothing is
// reserved; a read an ask grant covers holds the call for a Human.
func mayReadNamespace(sys objectSys, namespace string) error {
	p := authority.Params{Namespace: namespace}
	g, ok := sys.Holding(authority.ObjectRead, p)
	switch {
	case !ok:
		return fmt.Errorf("%w: namespace: creating in %s needs read on object_namespace:%s as well as write, "+
			"since a name taken there would tell of an Object you may not read", tools.ErrDenied, namespace, namespace)
	case g.Effect == capabilities.Ask:
		return sys.Require(authority.ObjectRead, p)
	}
	return nil
}

func readObject() *tools.Tool {
	return &tools.Tool{
		Name:        "read_object",
		Description: "Read an Object by oid, or by namespace and name. Needs read on the Object or its namespace. A runtime-local payload from before a reopen is reported as lost, never as empty.",
		Schema: schema.Object(map[string]*schema.Schema{
			"oid":       {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64)},
			"namespace": identSchema(),
			"name":      identSchema(),
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
	if err := checkIdents("namespace", args.Namespace, "name", args.Name); err != nil {
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
	if errors.Is(err, objects.ErrNotFound) && args.OID != "" {
		return tools.Outcome{}, tools.Errorf(tools.CodeNotFound, "oid: %w", err)
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
		Description: "Replace an Object's payload with compare-and-swap: expected_version must be the version you read, or nothing changes and a conflict is returned. Needs write on the Object or its namespace; the Object's metadata, and the current version of a conflict, are shown only if you may read it.",
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
	meta, err := tools.StatAuthorized(sys, authority.ObjectWrite, args.OID)
	if errors.Is(err, objects.ErrNotFound) {
		return tools.Outcome{}, tools.Errorf(tools.CodeNotFound, "oid: %w", err)
	}
	if err != nil {
		return tools.Outcome{}, err
	}
	// Write does not imply read: what the write shows beyond what the
	// writer knows is what read_object would show, so only to a reader.
	reader := readable(sys, authority.Params{OID: meta.OID, Namespace: meta.Namespace})
	m, err := sys.WriteObject(args.OID, args.ExpectedVersion, objects.WriteSpec{Payload: args.Payload, Labels: labels})
	switch {
	case errors.Is(err, objects.ErrConflict) && !reader:
		// The current version is the Object's, not the writer's: a
		// failed compare-and-swap says only that it is not the one given.
		return tools.Outcome{}, tools.Errorf(tools.CodeConflict,
			"expected_version: object %s is not at version %d, so nothing was written; its current version is shown only to a caller who may read it: %w",
			args.OID, args.ExpectedVersion, objects.ErrConflict)
	case errors.Is(err, objects.ErrConflict):
		return tools.Outcome{}, tools.Errorf(tools.CodeConflict, "expected_version: %w", err)
	case err != nil:
		return tools.Outcome{}, err
	case !reader:
		return tools.Outcome{Result: writeResult(m)}, nil
	}
	return tools.Outcome{Result: metaResult(m)}, nil
}

// List pages: how many Objects a call lists by default and at most, and the
// bytes of metadata one page holds at most (labels alone may be 64 KiB an
// Object), so that a large namespace never floods a context.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	MaxListBytes     = 512 * 1024
)

func listObjects() *tools.Tool {
	return &tools.Tool{
		Name: "list_objects",
		Description: "List the Objects of a namespace (default: your own) by name, metadata only, a page at a time: has_more=true means more follow; " +
			"ask for them with after=next_after. Needs read on object_namespace:<namespace>.",
		Schema: schema.Object(map[string]*schema.Schema{
			"namespace": identSchema(),
			"after": {Type: "string", MaxLength: schema.Ptr(objects.MaxIdentLen),
				Description: "List only names after this one (byte order): the next_after of the page before."},
			"limit": {Type: "integer", Minimum: schema.Ptr(1.0), Maximum: schema.Ptr(float64(MaxListLimit)), Default: DefaultListLimit,
				Description: fmt.Sprintf("At most this many Objects (a page also stops at %d KiB of metadata).", MaxListBytes/1024)},
		}),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return listObj(sys, raw)
		},
	}
}

func listObj(sys objectSys, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		Namespace string
		After     string
		Limit     int
	}
	if err := decode("list_objects", raw, &args); err != nil {
		return tools.Outcome{}, err
	}
	if args.Namespace == "" {
		args.Namespace = sys.Self().Namespace
	}
	if err := checkIdents("namespace", args.Namespace, "after", args.After); err != nil {
		return tools.Outcome{}, err
	}
	if args.Limit < 1 || args.Limit > MaxListLimit {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "limit: must be from 1 through %d, got %d", MaxListLimit, args.Limit)
	}
	if err := sys.Require(authority.ObjectList, authority.Params{Namespace: args.Namespace}); err != nil {
		return tools.Outcome{}, err
	}
	metas, more, err := sys.ListObjects(args.Namespace, args.After, args.Limit)
	if err != nil {
		return tools.Outcome{}, err
	}
	list := make([]map[string]any, 0, len(metas))
	size := 0
	for i, m := range metas {
		entry := metaResult(m)
		encoded, err := schema.Marshal(entry)
		if err != nil {
			return tools.Outcome{}, fmt.Errorf("list_objects: encode %s: %w", m.OID, err)
		}
		// The first entry always fits: one Object's metadata is far
		// below the bound.
		if size += len(encoded) + 1; i > 0 && size > MaxListBytes {
			more = true
			break
		}
		list = append(list, entry)
	}
	out := map[string]any{"namespace": args.Namespace, "objects": list, "has_more": more}
	if more {
		out["next_after"] = metas[len(list)-1].Name
	}
	return tools.Outcome{Result: out}, nil
}
