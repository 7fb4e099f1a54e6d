package objects

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Tier says where an object's payload lives.
type Tier string

const (
	// TierRuntimeLocal payloads live in the runtime's memory; their metadata
	// is durable but the bytes do not survive a reopen.
	TierRuntimeLocal Tier = "runtime_local"
	// TierDurable payloads are stored in Pebble with the metadata.
	TierDurable Tier = "durable"
)

// Limits enforced on identifiers.
const (
	// MaxIdentLen bounds namespace, name, kind, OID, label keys, sequence
	// names and event kinds, in bytes.
	MaxIdentLen = 256
)

// Meta is an Object's durable metadata.
type Meta struct {
	OID           string            `json:"oid"`
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	Kind          string            `json:"kind"`
	Version       uint64            `json:"version"`
	Labels        map[string]string `json:"labels"`
	Owner         string            `json:"owner"`
	Tier          Tier              `json:"tier"`
	PayloadSHA256 string            `json:"payload_sha256"`
	PayloadBytes  int               `json:"payload_bytes"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	// PayloadLost is computed on read: the payload is runtime-local and was
	// written by an earlier runtime instance, so it is gone.
	PayloadLost bool `json:"payload_lost"`
}

// CreateSpec describes a new object.
type CreateSpec struct {
	Namespace string
	Name      string
	Kind      string
	Owner     string
	Labels    map[string]string
	// Tier is where the payload lives; "" means TierRuntimeLocal.
	Tier    Tier
	Payload []byte
	// OID is the object id; "" means a new random UUID.
	OID string
}

// WriteSpec is a new version of an object.
type WriteSpec struct {
	// Payload replaces the payload (nil means empty) unless KeepPayload.
	Payload []byte
	// Labels replaces the labels; nil leaves them unchanged, an empty map
	// clears them.
	Labels map[string]string
	// KeepPayload leaves the payload as it is (a labels-only write). A lost
	// runtime-local payload stays lost.
	KeepPayload bool
	// DropPayload makes the new version's runtime-local payload lost, as a
	// reopen leaves it, with no digest or size: a checkpoint restore writes
	// back an Object whose payload the checkpoint found lost. Payload and
	// PayloadTail must be empty, and a durable Object refuses it.
	DropPayload bool
	// PayloadSHA256, when not empty, is the hex SHA-256 of Payload that the
	// caller already knows, as a caller that extends a payload keeps a
	// running digest of it: the store then does not hash Payload again.
	// It must be exact; a store opened with LIBOS_CHECK_CACHES=1 checks it.
	PayloadSHA256 string
	// Handoff gives Payload and PayloadTail to the store, which keeps them
	// without a copy: the caller never modifies them afterwards.
	Handoff bool
	// PayloadTail follows Payload: the payload is the two together. A
	// caller that extends a payload from version to version hands its
	// closing bytes over here, with Handoff, so that the next version may
	// append to Payload's array in place, past the len(Payload) bytes this
	// version keeps.
	PayloadTail []byte
}

// An EventEncoder writes an event's data when the batch is built
// (Txn.AppendEventFunc): AppendEvent appends it to dst, which may hold
// bytes of the store's already, and returns the result; a result that does
// not begin with those bytes fails the commit. dst is the store's scratch
// buffer, of which the store keeps a copy: AppendEvent must not keep it. A
// pointer to a caller's own type is one, so handing it over allocates
// nothing.
type EventEncoder interface {
	AppendEvent(dst []byte) ([]byte, error)
}

// EventEncoderFunc is a function that is an EventEncoder.
type EventEncoderFunc func(dst []byte) ([]byte, error)

// AppendEvent calls f.
func (f EventEncoderFunc) AppendEvent(dst []byte) ([]byte, error) { return f(dst) }

// Event is one entry of the append-only event log.
type Event struct {
	Seq  uint64          `json:"seq"`
	Time time.Time       `json:"time"`
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data"`

	// encode writes Data when the batch is built (Txn.AppendEventFunc).
	encode EventEncoder
	// object is the metadata an object event's Data is written from when
	// the batch is built (Txn.objectEvent); never modified.
	object *storedMeta
	// stored is the event's stored form when its data was written late,
	// into it: Data is its tail.
	stored []byte
}

// Event kinds appended by object operations.
const (
	EventObjectCreated = "object.created"
	EventObjectWritten = "object.written"
	EventObjectRemoved = "object.removed"
)

// ObjectEvent is the data of the object.* events.
type ObjectEvent struct {
	OID       string `json:"oid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Version   uint64 `json:"version"`
}

// checkIdent validates namespace/name-like fields: non-empty, at most
// MaxIdentLen bytes, no NUL (NUL separates namespace and name in the index).
func checkIdent(field, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s: must not be empty", ErrInvalid, field)
	case len(v) > MaxIdentLen:
		return fmt.Errorf("%w: %s: must be at most %d bytes, got %d", ErrInvalid, field, MaxIdentLen, len(v))
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%w: %s: must not contain NUL bytes", ErrInvalid, field)
	}
	return nil
}

// Bounds of an Object's labels. Labels live in its durable metadata
// whatever the payload's tier, and every listing repeats them, so they are
// bounded on their own: the payload's bound does not reach them.
const (
	// MaxLabels bounds how many labels an Object has.
	MaxLabels = 64
	// MaxLabelValueLen bounds a label's value, in bytes (keys are
	// identifiers: at most MaxIdentLen bytes).
	MaxLabelValueLen = 1024
)

func checkLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: labels: must have at most %d labels, got %d", ErrInvalid, MaxLabels, len(labels))
	}
	for k, v := range labels {
		if err := checkIdent("labels key", k); err != nil {
			return err
		}
		if len(v) > MaxLabelValueLen {
			return fmt.Errorf("%w: labels[%q]: value must be at most %d bytes, got %d", ErrInvalid, k, MaxLabelValueLen, len(v))
		}
	}
	return nil
}

func checkOID(oid string) error { return checkIdent("oid", oid) }

// payloadDigest returns the hex SHA-256 of p: known, when the caller
// handed it over, or computed.
func (tx *Txn) payloadDigest(p payload, known string) (string, error) {
	if known == "" {
		return p.hash(), nil
	}
	if tx.s.checkHandoffs {
		if want := p.hash(); known != want {
			return "", fmt.Errorf("%w: payload_sha256: must be the SHA-256 of the payload, %s, got %s", ErrInvalid, want, known)
		}
	}
	return known, nil
}

func payloadHash(p []byte) string {
	sum := sha256.Sum256(p)
	return hex.EncodeToString(sum[:])
}

func (p payload) hash() string {
	if len(p.tail) == 0 {
		return payloadHash(p.body)
	}
	h := sha256.New()
	h.Write(p.body)
	h.Write(p.tail)
	return hex.EncodeToString(h.Sum(nil))
}

func copyLabels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return nil
	}
	return maps.Clone(l)
}

// publicMeta converts stored metadata to the caller's copy and computes
// PayloadLost against this runtime instance.
func (tx *Txn) publicMeta(sm *storedMeta) Meta {
	m := tx.sharedMeta(sm)
	m.Labels = copyLabels(sm.Labels)
	return m
}

// sharedMeta is publicMeta with the Labels map of sm itself.
func (tx *Txn) sharedMeta(sm *storedMeta) Meta {
	m := sm.Meta
	m.PayloadLost = sm.Tier == TierRuntimeLocal && sm.Instance != tx.s.instance
	return m
}

// defaultMetaCacheLimit bounds Store.metaCache; beyond it a random entry is
// evicted per insert.
const defaultMetaCacheLimit = 1 << 14

// loadMeta reads the stored metadata of oid through the overlay (and, in an
// Update, the committed-metadata cache). The returned metadata shares its
// Labels map with the cache or the overlay: callers replace the map, never
// modify it.
func (tx *Txn) loadMeta(oid string) (storedMeta, bool, error) {
	key := metaKey(oid)
	sv, staged := tx.writes[string(key)]
	if staged && sv.meta != nil {
		return *sv.meta, true, nil
	}
	if !staged && !tx.readOnly {
		if sm, ok := tx.s.metaCache[oid]; ok {
			return *sm, true, nil
		}
		// The cache let it go: a batch not yet applied may hold its
		// decoded form, which spares encoding it under the lock to decode
		// it again.
		if sv := tx.pendingStaged(key); sv != nil && sv.meta != nil {
			tx.s.cacheMeta(oid, sv.meta)
			return *sv.meta, true, nil
		}
	}
	raw, ok, err := tx.get(key)
	if err != nil || !ok {
		return storedMeta{}, false, err
	}
	sm, err := decodeMeta(raw)
	if err != nil {
		return storedMeta{}, false, fmt.Errorf("meta of %s: %w", oid, err)
	}
	if !staged && !tx.readOnly {
		cached := sm
		tx.s.cacheMeta(oid, &cached)
	}
	return sm, true, nil
}

// cacheMeta records committed metadata, which must not be modified
// afterwards. Caller holds writeMu.
func (s *Store) cacheMeta(oid string, sm *storedMeta) {
	if _, ok := s.metaCache[oid]; !ok && len(s.metaCache) >= s.metaCacheLimit {
		for victim := range s.metaCache {
			delete(s.metaCache, victim)
			break
		}
	}
	s.metaCache[oid] = sm
}

// publishMetas brings the metadata cache up to date with a commit handed on
// to be applied. Caller holds writeMu.
func (tx *Txn) publishMetas() {
	for k, sv := range tx.writes {
		if !strings.HasPrefix(k, prefixMeta) {
			continue
		}
		oid := k[len(prefixMeta):]
		switch {
		case sv.deleted:
			delete(tx.s.metaCache, oid)
		case sv.meta != nil:
			tx.s.cacheMeta(oid, sv.meta)
		default:
			// Only stageMeta stages metadata, and it keeps the decoded
			// form; an undecodable value is better left uncached.
			delete(tx.s.metaCache, oid)
		}
	}
}

func (tx *Txn) stageMeta(sm *storedMeta) {
	kept := *sm
	sv := tx.newStaged()
	// Encoded when the batch is built, out of the write lock: reads of
	// metadata take the decoded form (loadMeta, the metadata cache).
	sv.meta, sv.encode = &kept, &kept
	tx.stageValue(metaKey(sm.OID), sv)
}

// objectEvent appends an event of kind about the object whose metadata is
// sm. Its data is written when the batch is built, out of the write lock,
// as the kernel's events are (AppendEventFunc): sm is never modified.
func (tx *Txn) objectEvent(kind string, sm *storedMeta) {
	tx.appendEvent(kind, nil)
	tx.events[len(tx.events)-1].object = sm
}

// objectEventJSON returns exactly what json.Marshal makes of the
// ObjectEvent of sm; identifiers that need no escaping (the usual case) are
// written directly because reflection-based marshalling is a large part of
// a compare-and-swap write.
func objectEventJSON(sm *storedMeta) []byte {
	if !plainJSON(sm.OID) || !plainJSON(sm.Namespace) || !plainJSON(sm.Name) || !plainJSON(sm.Kind) {
		data, err := json.Marshal(ObjectEvent{OID: sm.OID, Namespace: sm.Namespace, Name: sm.Name, Kind: sm.Kind, Version: sm.Version})
		if err != nil {
			// A struct of strings and an integer always marshals.
			panic(fmt.Sprintf("objects: marshal object event: %v", err))
		}
		return data
	}
	b := make([]byte, 0, 64+len(sm.OID)+len(sm.Namespace)+len(sm.Name)+len(sm.Kind))
	b = append(b, `{"oid":"`...)
	b = append(b, sm.OID...)
	b = append(b, `","namespace":"`...)
	b = append(b, sm.Namespace...)
	b = append(b, `","name":"`...)
	b = append(b, sm.Name...)
	b = append(b, `","kind":"`...)
	b = append(b, sm.Kind...)
	b = append(b, `","version":`...)
	b = strconv.AppendUint(b, sm.Version, 10)
	return append(b, '}')
}

// plainJSON reports whether encoding/json writes s between quotes
// unchanged: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e:
			return false
		case c == '"' || c == '\\' || c == '<' || c == '>' || c == '&':
			return false
		}
	}
	return true
}

// stagePayload stages p as the payload of sm (already carrying its hash and
// size) in its tier, copied unless handoff.
func (tx *Txn) stagePayload(sm *storedMeta, p payload, handoff bool) {
	if !handoff {
		p = payload{body: p.appendTo(make([]byte, 0, p.len()))}
	}
	if sm.Tier == TierDurable {
		tx.stageBytes(payloadKey(sm.OID), p.bytes())
		return
	}
	tx.stageLocal(sm.OID, &localChange{version: sm.Version, sha256: sm.PayloadSHA256, data: p})
}

// Create stages a new object at version 1 and appends an object.created
// event. It fails with ErrInvalid (naming the field), ErrNameTaken if the
// namespace already has the name, or ErrExists if the OID is used.
func (tx *Txn) Create(spec CreateSpec) (Meta, error) {
	if err := tx.usable(true); err != nil {
		return Meta{}, fmt.Errorf("objects: create: %w", err)
	}
	if err := validateCreate(&spec); err != nil {
		return Meta{}, fmt.Errorf("objects: create: %w", err)
	}
	if spec.OID == "" {
		// A new random UUID names no existing object: looking it up would
		// be a database miss per object created.
		spec.OID = uuid.NewString()
	} else if _, exists, err := tx.loadMeta(spec.OID); err != nil {
		return Meta{}, fmt.Errorf("objects: create: %w", err)
	} else if exists {
		return Meta{}, fmt.Errorf("objects: create: oid %s: %w", spec.OID, ErrExists)
	}
	nk := nameKey(spec.Namespace, spec.Name)
	if _, taken, err := tx.get(nk); err != nil {
		return Meta{}, fmt.Errorf("objects: create: name index: %w", err)
	} else if taken {
		return Meta{}, fmt.Errorf("objects: create %s/%s: %w", spec.Namespace, spec.Name, ErrNameTaken)
	}
	now := tx.s.now()
	sm := storedMeta{Meta: Meta{
		OID:           spec.OID,
		Namespace:     spec.Namespace,
		Name:          spec.Name,
		Kind:          spec.Kind,
		Version:       1,
		Labels:        copyLabels(spec.Labels),
		Owner:         spec.Owner,
		Tier:          spec.Tier,
		PayloadSHA256: payloadHash(spec.Payload),
		PayloadBytes:  len(spec.Payload),
		CreatedAt:     now,
		UpdatedAt:     now,
	}}
	if sm.Tier == TierRuntimeLocal {
		sm.Instance = tx.s.instance
	}
	tx.stageMeta(&sm)
	tx.stageBytes(nk, []byte(sm.OID))
	tx.stagePayload(&sm, payload{body: spec.Payload}, false)
	tx.objectEvent(EventObjectCreated, &sm)
	return tx.publicMeta(&sm), nil
}

func validateCreate(spec *CreateSpec) error {
	if err := checkIdent("namespace", spec.Namespace); err != nil {
		return err
	}
	if err := checkIdent("name", spec.Name); err != nil {
		return err
	}
	if err := checkIdent("kind", spec.Kind); err != nil {
		return err
	}
	if spec.OID != "" {
		if err := checkOID(spec.OID); err != nil {
			return err
		}
	}
	switch spec.Tier {
	case "":
		spec.Tier = TierRuntimeLocal
	case TierRuntimeLocal, TierDurable:
	default:
		return fmt.Errorf("%w: tier: must be %q or %q, got %q", ErrInvalid, TierRuntimeLocal, TierDurable, spec.Tier)
	}
	return checkLabels(spec.Labels)
}

// current loads oid for a compare-and-swap: ErrNotFound if absent,
// ErrConflict (with both versions) if expectedVersion is not current.
func (tx *Txn) current(op, oid string, expectedVersion uint64) (storedMeta, error) {
	if err := checkOID(oid); err != nil {
		return storedMeta{}, err
	}
	sm, ok, err := tx.loadMeta(oid)
	if err != nil {
		return storedMeta{}, err
	}
	if !ok {
		return storedMeta{}, fmt.Errorf("oid %s: %w", oid, ErrNotFound)
	}
	if sm.Version != expectedVersion {
		tx.s.conflicts.Add(1)
		return storedMeta{}, fmt.Errorf("%s %s: expected version %d, current version %d: %w", op, oid, expectedVersion, sm.Version, ErrConflict)
	}
	return sm, nil
}

// Write stages a new version of oid if its current version is
// expectedVersion (compare-and-swap) and appends an object.written event.
// A stale expectedVersion returns an error wrapping ErrConflict that names
// both versions, and stages nothing.
func (tx *Txn) Write(oid string, expectedVersion uint64, spec WriteSpec) (Meta, error) {
	if err := tx.usable(true); err != nil {
		return Meta{}, fmt.Errorf("objects: write: %w", err)
	}
	if err := checkLabels(spec.Labels); err != nil {
		return Meta{}, fmt.Errorf("objects: write: %w", err)
	}
	sm, err := tx.current("write", oid, expectedVersion)
	if err != nil {
		return Meta{}, fmt.Errorf("objects: write: %w", err)
	}
	sm.Version++
	sm.UpdatedAt = tx.s.now()
	if spec.Labels != nil {
		sm.Labels = copyLabels(spec.Labels)
	}
	if spec.DropPayload {
		switch {
		case spec.KeepPayload || len(spec.Payload) > 0 || len(spec.PayloadTail) > 0:
			return Meta{}, fmt.Errorf("objects: write %s: %w: drop_payload: a dropped payload takes no payload and cannot be kept", oid, ErrInvalid)
		case sm.Tier != TierRuntimeLocal:
			return Meta{}, fmt.Errorf("objects: write %s: %w: drop_payload: only a runtime-local payload can be lost (the tier is %s)", oid, ErrInvalid, sm.Tier)
		}
		if sm.Instance == tx.s.instance {
			// The payload this runtime held goes as a removed Object's does.
			tx.stageLocal(sm.OID, &localChange{version: sm.Version, removed: true})
		}
		// No instance is this runtime's: the payload reads as lost.
		sm.Instance, sm.PayloadSHA256, sm.PayloadBytes = "", "", 0
	} else if !spec.KeepPayload {
		p := payload{body: spec.Payload, tail: spec.PayloadTail}
		digest, err := tx.payloadDigest(p, spec.PayloadSHA256)
		if err != nil {
			return Meta{}, fmt.Errorf("objects: write %s: %w", oid, err)
		}
		sm.PayloadSHA256 = digest
		sm.PayloadBytes = p.len()
		if sm.Tier == TierRuntimeLocal {
			sm.Instance = tx.s.instance
		}
		tx.stagePayload(&sm, p, spec.Handoff)
	} else if sm.Tier == TierRuntimeLocal && sm.Instance == tx.s.instance {
		// The payload is unchanged but is now reachable under the new
		// version.
		data, err := tx.localPayload(&sm, sm.Version-1)
		if err != nil {
			return Meta{}, fmt.Errorf("objects: write %s: %w", oid, err)
		}
		tx.stageLocal(sm.OID, &localChange{version: sm.Version, sha256: sm.PayloadSHA256, data: data})
	}
	tx.stageMeta(&sm)
	tx.objectEvent(EventObjectWritten, &sm)
	return tx.publicMeta(&sm), nil
}

// Remove stages the removal of oid if its current version is
// expectedVersion and appends an object.removed event.
func (tx *Txn) Remove(oid string, expectedVersion uint64) error {
	if err := tx.usable(true); err != nil {
		return fmt.Errorf("objects: remove: %w", err)
	}
	sm, err := tx.current("remove", oid, expectedVersion)
	if err != nil {
		return fmt.Errorf("objects: remove: %w", err)
	}
	tx.stage(metaKey(oid), nil, true)
	tx.stage(nameKey(sm.Namespace, sm.Name), nil, true)
	if sm.Tier == TierDurable {
		tx.stage(payloadKey(oid), nil, true)
	} else {
		tx.stageLocal(oid, &localChange{version: sm.Version, removed: true})
	}
	tx.objectEvent(EventObjectRemoved, &sm)
	return nil
}

// Stat returns the metadata of oid, or an error wrapping ErrNotFound.
func (tx *Txn) Stat(oid string) (Meta, error) {
	m, err := tx.StatShared(oid)
	m.Labels = copyLabels(m.Labels)
	return m, err
}

// StatShared is Stat for a caller that only reads the metadata's Labels:
// the map is the store's own, never changed once the metadata is written
// (a write replaces it), so the caller may keep it but must not modify it.
// It saves Stat's copy of the labels in commits that check an Object's
// version.
func (tx *Txn) StatShared(oid string) (Meta, error) {
	if err := tx.usable(false); err != nil {
		return Meta{}, fmt.Errorf("objects: stat: %w", err)
	}
	if err := checkOID(oid); err != nil {
		return Meta{}, fmt.Errorf("objects: stat: %w", err)
	}
	sm, ok, err := tx.loadMeta(oid)
	if err != nil {
		return Meta{}, fmt.Errorf("objects: stat: %w", err)
	}
	if !ok {
		return Meta{}, fmt.Errorf("objects: stat %s: %w", oid, ErrNotFound)
	}
	return tx.sharedMeta(&sm), nil
}

// Read returns the metadata and a copy of the payload of oid. For a
// runtime-local payload written by an earlier runtime instance it returns
// the metadata (PayloadLost true), a nil payload and an error wrapping
// ErrPayloadLost.
func (tx *Txn) Read(oid string) (Meta, []byte, error) {
	if err := tx.usable(false); err != nil {
		return Meta{}, nil, fmt.Errorf("objects: read: %w", err)
	}
	if err := checkOID(oid); err != nil {
		return Meta{}, nil, fmt.Errorf("objects: read: %w", err)
	}
	sm, ok, err := tx.loadMeta(oid)
	if err != nil {
		return Meta{}, nil, fmt.Errorf("objects: read: %w", err)
	}
	if !ok {
		return Meta{}, nil, fmt.Errorf("objects: read %s: %w", oid, ErrNotFound)
	}
	m := tx.publicMeta(&sm)
	if m.PayloadLost {
		return m, nil, fmt.Errorf("objects: read %s (version %d): %w", oid, sm.Version, ErrPayloadLost)
	}
	var data []byte
	if sm.Tier == TierDurable {
		raw, ok, err := tx.get(payloadKey(oid))
		if err != nil {
			return Meta{}, nil, fmt.Errorf("objects: read %s: payload: %w", oid, err)
		}
		if !ok {
			return Meta{}, nil, fmt.Errorf("objects: read %s: durable payload missing for version %d", oid, sm.Version)
		}
		data = raw
	} else {
		local, err := tx.localPayload(&sm, sm.Version)
		if err != nil {
			return Meta{}, nil, fmt.Errorf("objects: read %s: %w", oid, err)
		}
		data = local.appendTo(make([]byte, 0, local.len()))
	}
	return m, data, nil
}

// localPayload finds the runtime-local payload of sm at version, first in
// the transaction's staged changes, then in memory. It must not be modified.
func (tx *Txn) localPayload(sm *storedMeta, version uint64) (payload, error) {
	if c, ok := tx.locals[sm.OID]; ok && !c.removed && c.version == version && c.sha256 == sm.PayloadSHA256 {
		return c.data, nil
	}
	if !tx.readOnly {
		// An Update may read a payload of a batch not yet applied, which
		// is published just before Pebble has the batch.
		var found *localChange
		tx.s.pending.Load().newestFirst(func(p *pendingBatch) bool {
			if c, ok := p.locals[sm.OID]; ok && !c.removed && c.version == version && c.sha256 == sm.PayloadSHA256 {
				found = c
			}
			return found == nil
		})
		if found != nil {
			return found.data, nil
		}
	}
	if data, ok := tx.s.locals.lookup(sm.OID, version, sm.PayloadSHA256); ok {
		return data, nil
	}
	// Metadata says this instance wrote the payload, so memory must have it.
	return payload{}, fmt.Errorf("runtime-local payload of version %d missing from memory", version)
}

// Lookup returns the metadata of the object named name in namespace, or an
// error wrapping ErrNotFound.
func (tx *Txn) Lookup(namespace, name string) (Meta, error) {
	if err := tx.usable(false); err != nil {
		return Meta{}, fmt.Errorf("objects: lookup: %w", err)
	}
	if err := checkIdent("namespace", namespace); err != nil {
		return Meta{}, fmt.Errorf("objects: lookup: %w", err)
	}
	if err := checkIdent("name", name); err != nil {
		return Meta{}, fmt.Errorf("objects: lookup: %w", err)
	}
	oid, ok, err := tx.get(nameKey(namespace, name))
	if err != nil {
		return Meta{}, fmt.Errorf("objects: lookup %s/%s: %w", namespace, name, err)
	}
	if !ok {
		return Meta{}, fmt.Errorf("objects: lookup %s/%s: %w", namespace, name, ErrNotFound)
	}
	sm, ok, err := tx.loadMeta(string(oid))
	if err != nil {
		return Meta{}, fmt.Errorf("objects: lookup %s/%s: %w", namespace, name, err)
	}
	if !ok {
		return Meta{}, fmt.Errorf("objects: lookup %s/%s: index names %s, which has no metadata", namespace, name, oid)
	}
	return tx.publicMeta(&sm), nil
}

// List returns the metadata of every object in namespace, ordered by name
// (byte order).
func (tx *Txn) List(namespace string) ([]Meta, error) {
	var metas []Meta
	err := tx.ListAfter(namespace, "", func(m Meta) (bool, error) {
		metas = append(metas, m)
		return true, nil
	})
	if metas == nil && err == nil {
		metas = []Meta{}
	}
	return metas, err
}

// ListAfter calls fn with the metadata of each object in namespace whose
// name sorts after after (byte order; "" starts at the first), in name
// order, until fn returns false or an error, which ListAfter returns.
func (tx *Txn) ListAfter(namespace, after string, fn func(Meta) (bool, error)) error {
	if err := tx.usable(false); err != nil {
		return fmt.Errorf("objects: list: %w", err)
	}
	if err := checkIdent("namespace", namespace); err != nil {
		return fmt.Errorf("objects: list: %w", err)
	}
	prefix := namespacePrefix(namespace)
	lower := prefix
	if after != "" {
		// Names hold no NUL byte, so the first name after after is at or
		// past after+NUL.
		lower = append(nameKey(namespace, after), 0)
	}
	// The index is read a chunk at a time, each chunk before its metadata
	// is loaded, so a page costs what it shows, not the namespace's size.
	const chunk = 64
	upper := prefixEnd(prefix)
	for {
		oids := make([]string, 0, chunk)
		var last []byte
		err := tx.iterate(lower, upper, false, false, func(key, value []byte) error {
			oids = append(oids, string(value))
			if len(oids) == chunk {
				last = append(last[:0], key...)
				return ErrStopScan
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("objects: list %s: %w", namespace, err)
		}
		for _, oid := range oids {
			sm, ok, err := tx.loadMeta(oid)
			if err != nil {
				return fmt.Errorf("objects: list %s: %w", namespace, err)
			}
			if !ok {
				return fmt.Errorf("objects: list %s: index names %s, which has no metadata", namespace, oid)
			}
			more, err := fn(tx.publicMeta(&sm))
			if err != nil || !more {
				return err
			}
		}
		if last == nil {
			return nil
		}
		lower = append(last, 0)
	}
}
