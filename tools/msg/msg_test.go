package msg

import (
	"encoding/json"
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
