package msg

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

// newMail is the fake of pid 2, whose parent is 1.
func newMail() *toolstest.Syscalls {
	s := toolstest.New(2)
	s.Proc.ParentPID = 1
	return s
}

func TestSendChecksItsArguments(t *testing.T) {
	sys := newMail()
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", `{"recipient_pid":1,"body":"done"}`)
	if e != nil || out.Result["message_id"] != "msg_1_1" || sys.Sent[0].Sender != "process:2" || sys.Sent[0].Kind != "normal" || sys.Sent[0].Channel != "default" {
		t.Fatalf("send: %v %v %+v", out.Result, e, sys.Sent)
	}
	for _, bad := range []string{`{"recipient_pid":1}`, `{"recipient_pid":1,"body":"x","kind":"urgent"}`, `{"recipient_pid":0,"body":"x"}`} {
		if _, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", bad); e == nil || e.Code != tools.CodeInvalidArguments {
			t.Errorf("%s: %v", bad, e)
		}
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", `{"recipient_pid":7,"body":"x"}`); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("to a stranger: %v", e)
	}
}

// A blocking receive with nothing to read waits durably, on a Human when
// the filter names a Human sender; one that could never be satisfied is
// refused instead of waiting forever.
func TestReceiveBlocksOrAnswers(t *testing.T) {
	sys := newMail()
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", `{}`)
	if e != nil || out.Block == nil || out.Block.Wait.Kind != process.WaitMessage {
		t.Fatalf("empty mailbox: %+v %v", out, e)
	}
	out, e = toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", `{"sender":"human:ana"}`)
	if e != nil || out.Block == nil || out.Block.Wait.Kind != process.WaitHuman {
		t.Fatalf("waiting for a Human: %+v %v", out, e)
	}
	for _, never := range []string{`{"message_ids":[]}`, `{"limit":0}`} {
		if _, e := toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", never); e == nil || e.Code != tools.CodeInvalidArguments {
			t.Errorf("%s: %v", never, e)
		}
	}
	sys.Deliver(mailbox.Message{Sender: "human:ana", Body: "hello"})
	out, e = toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", `{}`)
	if e != nil || out.Block != nil {
		t.Fatalf("with a message: %+v %v", out, e)
	}
	b, _ := json.Marshal(out.Result)
	if sys.Inbox[0].Status != mailbox.StatusAcked || !json.Valid(b) {
		t.Fatalf("the message is acknowledged with the read: %+v", sys.Inbox)
	}
}

// Reads apply the filter and the limit, acknowledge only when asked, and
// say that more is left; a message to oneself lands in one's own queue.
func TestReadFiltersAndPages(t *testing.T) {
	sys := newMail()
	for _, from := range []string{"human:ana", "process:1", "human:ana"} {
		sys.Deliver(mailbox.Message{Sender: from, Body: "b"})
	}
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "read_process_messages", `{"sender":"human:ana","limit":1,"ack":false}`)
	if e != nil || len(out.Result["messages"].([]mailbox.Message)) != 1 || out.Result["has_more"] != true || len(out.Result["acked_message_ids"].([]string)) != 0 {
		t.Fatalf("first page: %v %v", out.Result, e)
	}
	out, e = toolstest.Call(Tools(tools.Config{}), sys, "read_process_messages", `{"sender":"human:ana"}`)
	if e != nil || len(out.Result["acked_message_ids"].([]string)) != 2 || sys.Inbox[1].Status != mailbox.StatusUnread {
		t.Fatalf("acking read: %v %v", out.Result, e)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", `{"recipient_pid":2,"body":"note to self"}`); e != nil || len(sys.Inbox) != 4 {
		t.Fatalf("to oneself: %v (%d queued)", e, len(sys.Inbox))
	}
	// A blocked receive resumes by reading with its own arguments.
	res, e := toolstest.Resume(Tools(tools.Config{}), sys, "receive_process_messages", tools.Pending{ID: "p", Data: []byte(`{"sender":"process:1","limit":50,"ack":true,"block":true}`)})
	if e != nil || len(res.Result["messages"].([]mailbox.Message)) != 1 || sys.Inbox[1].Status != mailbox.StatusAcked {
		t.Fatalf("resumed receive: %v %v", res.Result, e)
	}
}

// A blocking receive whose exact ids can never match is refused, naming the
// id and the rule; an id of one's own queue that has not arrived yet is
// worth waiting for, even next to ids already excluded.
func TestReceiveRefusesIDsThatCanNeverMatch(t *testing.T) {
	sys := newMail()
	sys.Deliver(mailbox.Message{Sender: "human:ana", Body: "read already"}) // msg_2_1
	sys.Deliver(mailbox.Message{Sender: "human:ana", Body: "still unread"}) // msg_2_2
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "read_process_messages", `{"message_ids":["msg_2_1"]}`); e != nil {
		t.Fatal(e)
	}
	refused := []struct{ args, want string }{
		{`{"message_ids":["msg_99_1"]}`, `message_ids[0]: "msg_99_1" is a message of process 99's queue`},
		{`{"message_ids":["not-an-id"]}`, `message_ids[0]: "not-an-id" is not a message id`},
		{`{"message_ids":["msg_2_01"]}`, `message_ids[0]: "msg_2_01" is not a message id`},
		{`{"message_ids":["msg_2_1"]}`, `message_ids[0] "msg_2_1" is acked and include_acked is false`},
		{`{"message_ids":["msg_2_2"],"sender":"human:bob"}`, `message_ids[0] "msg_2_2" does not match the other filters`},
		// A malformed id is refused even next to one that may still come.
		{`{"message_ids":["msg_2_9","msg_2_x"]}`, `message_ids[1]: "msg_2_x" is not a message id`},
		{`{"message_ids":["msg_2_9","msg_1_9"]}`, `message_ids[1]: "msg_1_9" is a message of process 1's queue`},
	}
	for _, c := range refused {
		out, e := toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", c.args)
		if e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, c.want) || !strings.Contains(e.Message, "wait forever") {
			t.Errorf("%s: %+v %v; want invalid_arguments containing %q", c.args, out, e, c.want)
		}
	}
	for _, wait := range []string{`{"message_ids":["msg_2_3"]}`, `{"message_ids":["msg_2_1","msg_2_7"]}`} {
		out, e := toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", wait)
		if e != nil || out.Block == nil {
			t.Errorf("%s must wait: %+v %v", wait, out, e)
		}
	}
	// Without block the same ids read nothing, as a read does; with
	// include_acked the acked one is returned at once.
	for _, read := range []string{`{"message_ids":["msg_99_1","not-an-id"],"block":false}`, `{"message_ids":["msg_2_1"],"include_acked":true}`} {
		if out, e := toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", read); e != nil || out.Block != nil {
			t.Errorf("%s: %+v %v", read, out, e)
		}
	}
	if sys.Inbox[1].Status != mailbox.StatusUnread {
		t.Fatalf("a refused receive acknowledged a message: %+v", sys.Inbox[1])
	}
	// A message a checkpoint restore superseded never matches again.
	gone := sys.Deliver(mailbox.Message{Sender: "human:ana", Body: "restored away"})
	sys.Inbox[len(sys.Inbox)-1].Status = mailbox.StatusSuperseded
	_, e := toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", `{"message_ids":["`+gone.ID+`"],"include_acked":true}`)
	if e == nil || !strings.Contains(e.Message, "was superseded by a checkpoint restore") {
		t.Fatalf("a superseded id: %v", e)
	}
	// A long list names a few ids and counts the rest.
	var ids []string
	for range 5 {
		ids = append(ids, fmt.Sprintf("%q", sys.Deliver(mailbox.Message{Sender: "human:ana", Body: "x"}).ID))
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "read_process_messages", `{}`); e != nil {
		t.Fatal(e)
	}
	_, e = toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", `{"message_ids":[`+strings.Join(ids, ",")+`]}`)
	if e == nil || !strings.Contains(e.Message, "2 more alike") {
		t.Fatalf("five excluded ids: %v", e)
	}
}

// Channels, correlation ids and reply_to take as many characters as the
// mailbox stores, so a message on a long channel can be sent and selected.
func TestLabelsTakeTheMailboxBound(t *testing.T) {
	sys := newMail()
	long := strings.Repeat("c", mailbox.MaxLabelChars)
	for _, field := range []string{"channel", "correlation_id", "reply_to"} {
		send := fmt.Sprintf(`{"recipient_pid":2,"body":"b",%q:%q}`, field, long)
		if _, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", send); e != nil {
			t.Fatalf("send on a %d-character %s: %v", len(long), field, e)
		}
		out, e := toolstest.Call(Tools(tools.Config{}), sys, "read_process_messages", fmt.Sprintf(`{%q:%q}`, field, long))
		if e != nil || len(out.Result["messages"].([]mailbox.Message)) != 1 {
			t.Fatalf("select by a %d-character %s: %v %v", len(long), field, out.Result, e)
		}
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "read_process_messages", fmt.Sprintf(`{"channel":%q}`, long+"c")); e == nil || e.Code != tools.CodeInvalidArguments {
		t.Fatalf("a channel over the bound: %v", e)
	}
}

// The largest result a read returns holds any one message the mailbox
// accepts.
func TestAnyMessageFitsARead(t *testing.T) {
	if MaxResultBytes < mailbox.MaxMessageJSONBytes {
		t.Fatalf("MaxResultBytes %d is less than mailbox.MaxMessageJSONBytes %d", MaxResultBytes, mailbox.MaxMessageJSONBytes)
	}
}

// A key named twice in the arguments or the payload is refused, not
// collapsed to its last value.
func TestSendRefusesDuplicateKeys(t *testing.T) {
	sys := newMail()
	for args, want := range map[string]string{
		`{"recipient_pid":1,"body":"x","payload":{"amount":1,"amount":1000000}}`: `payload: duplicate key "amount"`,
		`{"recipient_pid":1,"body":"x","recipient_pid":2}`:                       `arguments: duplicate key "recipient_pid"`,
	} {
		if _, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", args); e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %v; want invalid_arguments containing %s", args, e, want)
		}
	}
	if len(sys.Sent) != 0 {
		t.Fatalf("a refused send was sent: %+v", sys.Sent)
	}
}
