package mailbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/objects"
)

func TestPostValidation(t *testing.T) {
	ok := Message{Sender: "process:1", Recipient: 2, Body: "b"}
	with := func(edit func(m *Message)) Message {
		m := ok
		edit(&m)
		return m
	}
	cases := []struct {
		name  string
		m     Message
		field string
		rule  string
	}{
		{"recipient zero", with(func(m *Message) { m.Recipient = 0 }), "recipient", "must be a positive pid (got 0)"},
		{"recipient negative", with(func(m *Message) { m.Recipient = -4 }), "recipient", "must be a positive pid (got -4)"},
		{"sender empty", with(func(m *Message) { m.Sender = "" }), "sender", `must be "process:<pid>" or "human:<name>" (got "")`},
		{"sender other scheme", with(func(m *Message) { m.Sender = "robot:1" }), "sender", `must be "process:<pid>" or "human:<name>"`},
		{"sender pid zero", with(func(m *Message) { m.Sender = "process:0" }), "sender", "positive decimal pid"},
		{"sender pid leading zero", with(func(m *Message) { m.Sender = "process:01" }), "sender", "positive decimal pid"},
		{"sender pid not a number", with(func(m *Message) { m.Sender = "process:x" }), "sender", "positive decimal pid"},
		{"sender pid overflow", with(func(m *Message) { m.Sender = "process:99999999999999999999" }), "sender", "positive decimal pid"},
		{"human blank", with(func(m *Message) { m.Sender = "human: " }), "sender", "non-blank name"},
		{"human too long", with(func(m *Message) { m.Sender = "human:" + strings.Repeat("é", 129) }), "sender", "at most 128 characters (got 129)"},
		{"human control", with(func(m *Message) { m.Sender = "human:a\nb" }), "sender", "control characters"},
		{"kind", with(func(m *Message) { m.Kind = "urgent" }), "kind", `must be normal or interrupt (got "urgent")`},
		{"channel long", with(func(m *Message) { m.Channel = strings.Repeat("c", 257) }), "channel", "at most 256 characters (got 257)"},
		{"channel control", with(func(m *Message) { m.Channel = "a\tb" }), "channel", "must not contain control characters (found U+0009 at byte 1)"},
		{"correlation long", with(func(m *Message) { m.CorrelationID = strings.Repeat("c", 257) }), "correlation_id", "at most 256 characters"},
		{"reply_to control", with(func(m *Message) { m.ReplyTo = "x\x00" }), "reply_to", "control characters"},
		{"subject long", with(func(m *Message) { m.Subject = strings.Repeat("s", 600) }), "subject", "at most 512 characters (got 600)"},
		{"subject utf8", with(func(m *Message) { m.Subject = "\xff" }), "subject", "must be valid UTF-8"},
		{"body long", with(func(m *Message) { m.Body = strings.Repeat("ß", 32001) }), "body", "at most 32000 characters (got 32001)"},
		{"body utf8", with(func(m *Message) { m.Body = "a\xc3" }), "body", "must be valid UTF-8"},
		{"payload invalid", with(func(m *Message) { m.Payload = json.RawMessage(`{"a":`) }), "payload", "must be valid JSON"},
		{"payload trailing", with(func(m *Message) { m.Payload = json.RawMessage(`1 2`) }), "payload", "must be valid JSON"},
		{"payload duplicate key", with(func(m *Message) { m.Payload = json.RawMessage(`{"a":1,"b":{"c":1,"c":2}}`) }), "payload", `duplicate object key "c"`},
		{"payload utf8", with(func(m *Message) { m.Payload = json.RawMessage("\"\xff\"") }), "payload", "must be valid UTF-8"},
		{"payload too large", with(func(m *Message) { m.Payload = bigPayload(MaxPayloadBytes + 1) }), "payload", "at most 131072 bytes of compact JSON (got 131073)"},
		{"payload too deep", with(func(m *Message) {
			m.Payload = json.RawMessage(strings.Repeat("[", maxPayloadDepth+1) + strings.Repeat("]", maxPayloadDepth+1))
		}), "payload", "exceeded max depth"},
	}
	s, _ := openStore(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			checkFieldError(t, err, tc.field, tc.rule)
			update(t, s, func(tx *objects.Txn) error {
				_, err := Post(tx, tc.m, t0)
				checkFieldError(t, err, tc.field, tc.rule)
				return nil // commit whatever Post staged: it must be nothing
			})
		})
	}
	if got := rawMailboxKeys(t, s); len(got) != 0 {
		t.Fatalf("refused posts left keys %q", got)
	}
	update(t, s, func(tx *objects.Txn) error {
		_, err := Post(tx, ok, time.Time{})
		checkFieldError(t, err, "now", "must not be zero")
		return nil
	})

	// The limits themselves are accepted.
	for _, m := range []Message{
		with(func(m *Message) { m.Subject = strings.Repeat("ü", MaxSubjectChars) }),
		with(func(m *Message) { m.Body = strings.Repeat("ü", MaxBodyChars) }),
		with(func(m *Message) { m.Payload = bigPayload(MaxPayloadBytes) }),
		// The bound applies to the compact form, so padding does not count.
		with(func(m *Message) { m.Payload = json.RawMessage("  " + string(bigPayload(MaxPayloadBytes)) + "\n") }),
		with(func(m *Message) { m.Sender = "human:" + strings.Repeat("é", MaxHumanNameChars) }),
		with(func(m *Message) { m.Channel = strings.Repeat("c", MaxLabelChars); m.Body = "" }),
		with(func(m *Message) { m.Sender = "process:9223372036854775807"; m.Kind = KindInterrupt }),
		with(func(m *Message) { m.Payload = json.RawMessage(`  null `) }),
		with(func(m *Message) {
			m.Payload = json.RawMessage(strings.Repeat("[", maxPayloadDepth) + strings.Repeat("]", maxPayloadDepth))
		}),
	} {
		if err := m.Validate(); err != nil {
			t.Fatalf("Validate(%.60q...): %v", m.Sender+m.Subject, err)
		}
		post(t, s, m)
	}
}

// bigPayload returns a compact JSON string value of exactly n bytes.
func bigPayload(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("p", n-2) + `"`)
}

func checkFieldError(t *testing.T, err error, field, rule string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error = %v, want ErrInvalid", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FieldError", err)
	}
	if fe.Field != field || !strings.Contains(fe.Rule, rule) {
		t.Fatalf("error %q: field %q rule %q, want field %q rule containing %q", err, fe.Field, fe.Rule, field, rule)
	}
	if !strings.Contains(err.Error(), field+": ") {
		t.Fatalf("error %q does not name the field %q", err, field)
	}
}

func rawMailboxKeys(t *testing.T, s *objects.Store) []string {
	t.Helper()
	var keys []string
	view(t, s, func(tx *objects.Txn) error {
		return tx.Scan([]byte("mb/"), func(k, _ []byte) error {
			keys = append(keys, string(k))
			return nil
		})
	})
	return keys
}

func TestFilterValidation(t *testing.T) {
	many := make([]string, MaxMessageIDs+1)
	for i := range many {
		many[i] = FormatID(1, uint64(i+1))
	}
	cases := []struct {
		name  string
		f     Filter
		field string
		rule  string
	}{
		{"limit negative", Filter{Limit: -1}, "limit", "must be 0..1000 (got -1)"},
		{"limit too big", Filter{Limit: 1001}, "limit", "must be 0..1000 (got 1001)"},
		{"kind", Filter{Kind: strp("Normal")}, "kind", "must be normal or interrupt"},
		{"kind empty", Filter{Kind: strp("")}, "kind", "must be normal or interrupt"},
		{"too many ids", Filter{MessageIDs: &many}, "message_ids", "at most 1000 ids (got 1001)"},
		{"blank id", Filter{MessageIDs: idsp("msg_1_1", " ")}, "message_ids[1]", "must not be blank"},
		{"empty id", Filter{MessageIDs: idsp("")}, "message_ids[0]", "must not be blank"},
		{"duplicate id", Filter{MessageIDs: idsp("msg_1_1", "msg_1_2", "msg_1_1")}, "message_ids[2]", `duplicate of message_ids[0] ("msg_1_1")`},
	}
	s, _ := openStore(t)
	postN(t, s, 1, 1)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkFieldError(t, tc.f.Validate(), tc.field, tc.rule)
			update(t, s, func(tx *objects.Txn) error {
				_, err := Read(tx, 1, tc.f, true, bigBound, t0)
				checkFieldError(t, err, tc.field, tc.rule)
				_, err = FirstMatch(tx, 1, tc.f)
				checkFieldError(t, err, tc.field, tc.rule)
				return nil
			})
		})
	}
	if u, _ := countOf(t, s, 1); u != 1 {
		t.Fatal("a refused read acknowledged a message")
	}
	for _, f := range []Filter{
		{},
		{Limit: MaxLimit, Kind: strp(KindInterrupt)},
		{MessageIDs: idsp()},
		{MessageIDs: func() *[]string { ids := many[:MaxMessageIDs]; return &ids }()},
		{MessageIDs: idsp("not-an-id", "msg_1_1")},
	} {
		if err := f.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", f, err)
		}
	}
	// Read's own arguments.
	update(t, s, func(tx *objects.Txn) error {
		_, err := Read(tx, 0, Filter{}, false, bigBound, t0)
		checkFieldError(t, err, "recipient", "must be a positive pid (got 0)")
		_, err = Read(tx, 1, Filter{}, false, 0, t0)
		checkFieldError(t, err, "max_bytes", "must be positive (got 0)")
		_, err = Read(tx, 1, Filter{Limit: 1}, true, bigBound, time.Time{})
		checkFieldError(t, err, "now", "must not be zero")
		_, err = Get(tx, -1, "msg_1_1")
		checkFieldError(t, err, "recipient", "positive")
		_, _, err = Count(tx, 0)
		checkFieldError(t, err, "recipient", "positive")
		_, err = LastSeq(tx, 0)
		checkFieldError(t, err, "recipient", "positive")
		_, err = SupersedeAfter(tx, 0, 1)
		checkFieldError(t, err, "recipient", "positive")
		_, err = FirstMatch(tx, 0, Filter{})
		checkFieldError(t, err, "recipient", "positive")
		checkFieldError(t, List(tx, 0, func(*Message) error { return nil }), "recipient", "positive")
		checkFieldError(t, List(tx, 1, nil), "fn", "must not be nil")
		return nil
	})
}

func TestFilterJSONKeepsEmptyIDs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		nilIDs  bool
		matches bool
	}{
		{`{"limit":5}`, true, true},
		{`{"limit":5,"message_ids":null}`, true, true},
		{`{"limit":5,"message_ids":[]}`, false, false},
		{`{"limit":5,"message_ids":["msg_1_1"]}`, false, true},
	} {
		var f Filter
		if err := json.Unmarshal([]byte(tc.in), &f); err != nil {
			t.Fatal(err)
		}
		if (f.MessageIDs == nil) != tc.nilIDs {
			t.Fatalf("%s: MessageIDs nil = %v", tc.in, f.MessageIDs == nil)
		}
		m := &Message{ID: "msg_1_1", Status: StatusUnread}
		if f.Matches(m) != tc.matches {
			t.Fatalf("%s: Matches = %v", tc.in, !tc.matches)
		}
		out, _ := json.Marshal(f)
		var back Filter
		if err := json.Unmarshal(out, &back); err != nil || (back.MessageIDs == nil) != tc.nilIDs {
			t.Fatalf("%s: round trip %s lost the ids distinction", tc.in, out)
		}
	}
}

func TestMatchesStatus(t *testing.T) {
	for _, tc := range []struct {
		status       string
		includeAcked bool
		want         bool
	}{
		{StatusUnread, false, true},
		{StatusUnread, true, true},
		{StatusAcked, false, false},
		{StatusAcked, true, true},
		{StatusSuperseded, false, false},
		{StatusSuperseded, true, false},
		{"", true, false},
	} {
		m := &Message{ID: "msg_1_1", Status: tc.status}
		if got := (Filter{IncludeAcked: tc.includeAcked}).Matches(m); got != tc.want {
			t.Errorf("status %q include_acked %v: Matches = %v", tc.status, tc.includeAcked, got)
		}
	}
}

func TestIDs(t *testing.T) {
	if id := FormatID(42, 7); id != "msg_42_7" {
		t.Fatalf("FormatID = %s", id)
	}
	for _, tc := range []struct {
		id   string
		pid  int64
		seq  uint64
		good bool
	}{
		{"msg_42_7", 42, 7, true},
		{"msg_9223372036854775807_18446744073709551615", 9223372036854775807, 18446744073709551615, true},
		{"msg_42_07", 0, 0, false},
		{"msg_042_7", 0, 0, false},
		{"msg_0_7", 0, 0, false},
		{"msg_42_0", 0, 0, false},
		{"msg_42_", 0, 0, false},
		{"msg__7", 0, 0, false},
		{"msg_42", 0, 0, false},
		{"msg_42_7_1", 0, 0, false},
		{"msg_+42_7", 0, 0, false},
		{"msg_42_+7", 0, 0, false},
		{"msg_9223372036854775808_1", 0, 0, false},
		{"msg_1_18446744073709551616", 0, 0, false},
		{"MSG_42_7", 0, 0, false},
		{" msg_42_7", 0, 0, false},
	} {
		pid, seq, ok := ParseID(tc.id)
		if ok != tc.good || pid != tc.pid || seq != tc.seq {
			t.Errorf("ParseID(%q) = %d, %d, %v", tc.id, pid, seq, ok)
		}
		if ok && FormatID(pid, seq) != tc.id {
			t.Errorf("FormatID(ParseID(%q)) differs", tc.id)
		}
	}
}

func TestContentSHA256(t *testing.T) {
	m := Message{Sender: "human:ann", Kind: KindNormal, Channel: "default", Body: "hi \"there\"\n<b>&",
		Payload: json.RawMessage(`{"b":1.50,"a":[true,null,"\u00e9\u0001"]}`)}
	canonical := `{"body":"hi \"there\"\n<b>&","channel":"default","correlation_id":"","kind":"normal",` +
		`"payload":{"a":[true,null,"é\u0001"],"b":1.50},"reply_to":"","sender":"human:ann","subject":""}`
	sum := sha256.Sum256([]byte(canonical))
	if got, want := m.ContentSHA256(), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("ContentSHA256 = %s, want the hash of %s (%s)", got, canonical, want)
	}
	base := m.ContentSHA256()

	same := m
	same.Payload = json.RawMessage(" {\n \"a\" : [ true , null , \"é\\u0001\" ] , \"b\" : 1.50 } ")
	same.ID, same.Seq, same.Recipient, same.Status = "msg_3_3", 3, 3, StatusAcked
	same.CreatedAt, same.AckedAt = t0, t0
	if same.ContentSHA256() != base {
		t.Fatal("key order, whitespace, identity, status or times changed the content hash")
	}

	for name, edit := range map[string]func(m *Message){
		"sender":         func(m *Message) { m.Sender = "human:bob" },
		"kind":           func(m *Message) { m.Kind = KindInterrupt },
		"channel":        func(m *Message) { m.Channel = "x" },
		"correlation_id": func(m *Message) { m.CorrelationID = "c" },
		"reply_to":       func(m *Message) { m.ReplyTo = "r" },
		"subject":        func(m *Message) { m.Subject = "s" },
		"body":           func(m *Message) { m.Body = "hi" },
		"payload":        func(m *Message) { m.Payload = json.RawMessage(`{"b":1.5,"a":[true,null,"é\u0001"]}`) },
		"no payload":     func(m *Message) { m.Payload = nil },
		"null payload":   func(m *Message) { m.Payload = json.RawMessage(`null`) },
		// Moving text between fields must not collide.
		"field shift": func(m *Message) { m.Body = ""; m.Subject = "hi \"there\"\n<b>&" },
	} {
		c := m
		edit(&c)
		if c.ContentSHA256() == base {
			t.Errorf("changing %s kept the content hash", name)
		}
	}
	var none, null Message
	null.Payload = json.RawMessage("null")
	if none.ContentSHA256() != null.ContentSHA256() {
		// Both encode payload as null: documented as the same content.
		t.Errorf("absent and null payloads hash differently")
	}
}

func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b":2,"a":1}`, `{"a":1,"b":2}`},
		{` [ 1 , {"z":{"y":[],"x":{}}} , "a\/b" ] `, `[1,{"z":{"x":{},"y":[]}},"a/b"]`},
		{`"\u003c\u2028\t"`, "\"<\u2028\\t\""},
		{`-0.0e+10`, `-0.0e+10`},
		{`{"é":1,"e":2,"":3}`, `{"":3,"e":2,"é":1}`},
	} {
		got, err := canonicalJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("canonicalJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	deep := strings.Repeat("[", maxPayloadDepth+1) + strings.Repeat("]", maxPayloadDepth+1)
	if _, err := canonicalJSON([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nesting deeper than 10000") {
		t.Errorf("canonicalJSON(too deep) = %v", err)
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":2}`, `[1,]`, `{"a" 1}`, `1 2`, `{1:2}`, `nul`} {
		if _, err := canonicalJSON([]byte(bad)); err == nil {
			t.Errorf("canonicalJSON(%q) accepted", bad)
		}
	}
}
