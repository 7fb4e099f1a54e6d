package mailbox

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzFilterJSON decodes tool-style filter arguments and checks that
// Validate either refuses them with a field error or accepts a filter that
// keeps every documented bound and survives a JSON round trip.
func FuzzFilterJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"limit":50}`,
		`{"limit":1001}`,
		`{"limit":-1}`,
		`{"include_acked":true,"message_ids":[],"limit":3}`,
		`{"message_ids":null}`,
		`{"message_ids":["msg_1_1","msg_1_1"]}`,
		`{"message_ids":["msg_1_1"," "]}`,
		`{"kind":"interrupt","sender":"human:ann","channel":"default","correlation_id":"c","reply_to":"r"}`,
		`{"kind":"INTERRUPT"}`,
		`{"kind":null,"limit":0}`,
	} {
		f.Add([]byte(seed))
	}
	msgs := []*Message{
		{ID: "msg_1_1", Status: StatusUnread, Kind: KindNormal, Channel: DefaultChannel, Sender: "process:2"},
		{ID: "msg_1_2", Status: StatusAcked, Kind: KindInterrupt, Channel: "c", Sender: "human:ann", CorrelationID: "c", ReplyTo: "r"},
		{ID: "msg_1_3", Status: StatusSuperseded, Kind: KindNormal, Channel: DefaultChannel, Sender: "process:2"},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var flt Filter
		if err := json.Unmarshal(data, &flt); err != nil {
			return
		}
		if err := flt.Validate(); err != nil {
			var fe *FieldError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field == "" || fe.Rule == "" {
				t.Fatalf("Validate error %v is not a field error", err)
			}
			return
		}
		if flt.Limit < 0 || flt.Limit > MaxLimit {
			t.Fatalf("accepted limit %d", flt.Limit)
		}
		if flt.Kind != nil && *flt.Kind != KindNormal && *flt.Kind != KindInterrupt {
			t.Fatalf("accepted kind %q", *flt.Kind)
		}
		if flt.MessageIDs != nil {
			ids := *flt.MessageIDs
			if len(ids) > MaxMessageIDs {
				t.Fatalf("accepted %d ids", len(ids))
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if strings.TrimSpace(id) == "" || seen[id] {
					t.Fatalf("accepted blank or duplicate id %q", id)
				}
				seen[id] = true
			}
		}
		out, err := json.Marshal(flt)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back Filter
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", out, err)
		}
		if !reflect.DeepEqual(flt, back) {
			t.Fatalf("round trip changed the filter: %+v -> %s -> %+v", flt, out, back)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("round trip made the filter invalid: %v", err)
		}
		for _, m := range msgs {
			got := flt.Matches(m)
			if got && m.Status == StatusSuperseded {
				t.Fatalf("superseded message matched %+v", flt)
			}
			if got && m.Status == StatusAcked && !flt.IncludeAcked {
				t.Fatalf("acked message matched without include_acked")
			}
			if got && flt.MessageIDs != nil && len(*flt.MessageIDs) == 0 {
				t.Fatalf("empty message_ids matched %s", m.ID)
			}
			if got != back.Matches(m) {
				t.Fatalf("round trip changed Matches(%s)", m.ID)
			}
		}
	})
}

// FuzzCanonicalJSON checks that canonical payload JSON is valid, means the
// same as its input, and is a fixed point.
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{`{"b":1,"a":[true,null]}`, `"x\u0000"`, `[{"":{}}]`, `1e400`, `{"a":1,"a":1}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := canonicalJSON(data)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form %q of %q is not valid JSON", out, data)
		}
		again, err := canonicalJSON(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not a fixed point: %q -> %q (%v)", out, again, err)
		}
		var a, b any
		da := json.NewDecoder(strings.NewReader(string(data)))
		da.UseNumber()
		db := json.NewDecoder(strings.NewReader(string(out)))
		db.UseNumber()
		if da.Decode(&a) != nil || db.Decode(&b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical form %q means something else than %q", out, data)
		}
	})
}
