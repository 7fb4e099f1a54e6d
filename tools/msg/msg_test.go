package msg

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

// mailSys is the fake with a mailbox of its own and one parent.
type mailSys struct {
	*toolstest.Syscalls
	inbox []mailbox.Message
	sent  []mailbox.Message
}

func (s *mailSys) PostMessage(m mailbox.Message) (mailbox.Message, error) {
	if m.Recipient != s.Proc.PID && m.Recipient != s.Proc.ParentPID {
		return mailbox.Message{}, tools.Errorf(tools.CodeDenied, "recipient_pid: %d is not yourself, your parent or a direct child", m.Recipient)
	}
	m.ID, m.Status = fmt.Sprintf("m%d", len(s.sent)+1), mailbox.StatusUnread
	s.sent = append(s.sent, m)
	return m, nil
}

func (s *mailSys) HasMessage(f mailbox.Filter) (bool, error) {
	for _, m := range s.inbox {
		if m.Status == mailbox.StatusUnread {
			return true, nil
		}
	}
	return false, nil
}

func (s *mailSys) ReadMessages(f mailbox.Filter, ack bool) (mailbox.Page, error) {
	page := mailbox.Page{Messages: []mailbox.Message{}, AckedIDs: []string{}}
	for i := range s.inbox {
		if s.inbox[i].Status != mailbox.StatusUnread {
			continue
		}
		page.Messages = append(page.Messages, s.inbox[i])
		if ack {
			s.inbox[i].Status = mailbox.StatusAcked
			page.AckedIDs = append(page.AckedIDs, s.inbox[i].ID)
		}
	}
	return page, nil
}

func newMail() *mailSys {
	s := &mailSys{Syscalls: toolstest.New(2)}
	s.Proc.ParentPID = 1
	return s
}

func TestSendChecksItsArguments(t *testing.T) {
	sys := newMail()
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "send_process_message", `{"recipient_pid":1,"body":"done"}`)
	if e != nil || out.Result["message_id"] != "m1" || sys.sent[0].Kind != "normal" || sys.sent[0].Channel != "default" {
		t.Fatalf("send: %v %v %+v", out.Result, e, sys.sent)
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
	sys.inbox = []mailbox.Message{{ID: "h1", Body: "hello", Status: mailbox.StatusUnread}}
	out, e = toolstest.Call(Tools(tools.Config{}), sys, "receive_process_messages", `{}`)
	if e != nil || out.Block != nil {
		t.Fatalf("with a message: %+v %v", out, e)
	}
	b, _ := json.Marshal(out.Result)
	if sys.inbox[0].Status != mailbox.StatusAcked || !json.Valid(b) {
		t.Fatalf("the message is acknowledged with the read: %+v", sys.inbox)
	}
}
