package kernel

import (
	"fmt"
	"strings"

	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/quantum"
)

// maxNoticeBody bounds an interrupt body quoted in a notice; the full message
// stays readable through read_process_messages.
const maxNoticeBody = 2000

// newNotices returns the unread messages of r the process has not been
// told of, and advances its notified watermark.
func newNotices(tx *txn, r *procRecord) ([]quantum.Notice, error) {
	last, err := mailbox.LastSeq(tx.Txn, r.PID)
	if err != nil || last <= r.NotifiedSeq {
		return nil, err
	}
	var out []quantum.Notice
	err = mailbox.UnreadAfter(tx.Txn, r.PID, r.NotifiedSeq, func(m *mailbox.Message) error {
		out = append(out, quantum.Notice{ID: m.ID, Seq: m.Seq, Sender: m.Sender, Kind: m.Kind, Channel: m.Channel, Subject: m.Subject, Body: m.Body})
		return nil
	})
	r.NotifiedSeq = last
	return out, err
}

// messageNotice renders new messages for the model: interrupts are delivered
// with their content, normal messages are announced.
func messageNotice(msgs []quantum.Notice) (Entry, bool) {
	var b strings.Builder
	interrupt := false
	b.WriteString("(runtime notice) New messages in your mailbox:")
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n- %s from %s (%s, channel %s)", m.ID, m.Sender, m.Kind, m.Channel)
		if m.Subject != "" {
			fmt.Fprintf(&b, ", subject %q", m.Subject)
		}
		if m.Interrupt() {
			interrupt = true
			fmt.Fprintf(&b, ": %s", summarize(m.Body, maxNoticeBody))
		}
	}
	b.WriteString("\nRead and acknowledge them with read_process_messages before you continue.")
	return Entry{Role: llm.RoleUser, Kind: "notice", Content: b.String()}, interrupt
}
