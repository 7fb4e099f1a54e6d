package tools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/msg"
	"github.com/libos/libos/tools/session"
)

// TestSpecRangesAndDefaults pins the argument ranges and defaults that
// the runtime-session contract and the mailbox rules name, as the schemas
// the model is shown enforce them.
func TestSpecRangesAndDefaults(t *testing.T) {
	b, err := tools.NewBroker(append(session.Tools(tools.Config{MaxSleepSeconds: 60}), msg.Tools(tools.Config{})...)...)
	if err != nil {
		t.Fatal(err)
	}
	ok := []struct{ tool, args, want string }{
		{"get_current_time", `{}`, `{"timezone":"UTC"}`},
		{"sleep", `{"seconds":0}`, `{"seconds":0}`},
		{"sleep", `{"seconds":60}`, `{"seconds":60}`},
		{"compact_process_context", `{}`, `{"force":false,"max_chunks":8,"preserve_recent_entries":8,"target_tokens":4000}`},
		{"compact_process_context", `{"target_tokens":256,"preserve_recent_entries":0,"max_chunks":1}`, `{"force":false,"max_chunks":1,"preserve_recent_entries":0,"target_tokens":256}`},
		{"compact_process_context", `{"target_tokens":64000,"preserve_recent_entries":128,"max_chunks":64,"force":true}`, `{"force":true,"max_chunks":64,"preserve_recent_entries":128,"target_tokens":64000}`},
		{"read_process_messages", `{}`, `{"ack":true,"include_acked":false,"limit":50}`},
		{"receive_process_messages", `{}`, `{"ack":true,"block":true,"include_acked":false,"limit":50}`},
	}
	for _, c := range ok {
		_, got, err := b.Prepare(c.tool, json.RawMessage(c.args))
		if err != nil || string(got) != c.want {
			t.Errorf("%s %s: got %s, %v; want %s", c.tool, c.args, got, err, c.want)
		}
	}
	bad := []struct{ tool, args, field string }{
		{"sleep", `{}`, "seconds: required"},
		{"sleep", `{"seconds":-0.5}`, "seconds: must be >= 0"},
		{"sleep", `{"seconds":60.5}`, "seconds: must be <= 60"},
		{"compact_process_context", `{"target_tokens":255}`, "target_tokens: must be >= 256"},
		{"compact_process_context", `{"target_tokens":64001}`, "target_tokens: must be <= 64000"},
		{"compact_process_context", `{"preserve_recent_entries":129}`, "preserve_recent_entries: must be <= 128"},
		{"compact_process_context", `{"max_chunks":0}`, "max_chunks: must be >= 1"},
		{"compact_process_context", `{"max_chunks":65}`, "max_chunks: must be <= 64"},
		{"compact_process_context", `{"_resume_job":"j"}`, "_resume_job: unknown field"},
		{"read_process_messages", `{"limit":1001}`, "limit: must be <= 1000"},
		{"read_process_messages", `{"limit":-1}`, "limit: must be >= 0"},
		{"send_process_message", `{"recipient_pid":1,"body":"x","subject":"` + strings.Repeat("s", 513) + `"}`, "subject: must be at most 512"},
		{"send_process_message", `{"recipient_pid":1,"body":"` + strings.Repeat("b", 32001) + `"}`, "body: must be at most 32000"},
	}
	for _, c := range bad {
		_, _, err := b.Prepare(c.tool, json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %s: got %v, want an error containing %q", c.tool, c.args, err, c.field)
		}
	}
	// A blocking receive that could never be satisfied is refused before it
	// touches the mailbox (no Syscalls needed).
	recv, _ := b.Lookup("receive_process_messages")
	for _, args := range []string{`{"message_ids":[],"limit":50,"ack":true,"block":true}`, `{"limit":0,"ack":true,"block":true}`} {
		if _, err := recv.Invoke(context.Background(), nil, json.RawMessage(args)); err == nil {
			t.Errorf("blocking receive %s must be refused", args)
		}
	}
}
