// Package msg holds the mailbox tools: send_process_message,
// read_process_messages and receive_process_messages.
package msg

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// MaxResultBytes bounds the messages one read returns; a single valid
// message always fits (TestAnyMessageFitsARead).
const MaxResultBytes = 512 * 1024

var payloadDescription = fmt.Sprintf("Any JSON value, at most %d KiB of JSON (<, > and & count 6 bytes each).", mailbox.MaxPayloadBytes>>10)

// Tools returns the mailbox family.
func Tools(tools.Config) []*tools.Tool {
	return []*tools.Tool{send(), read(), receive()}
}

func send() *tools.Tool {
	return &tools.Tool{
		Name: "send_process_message",
		Description: "Send a durable message to yourself, your parent or a direct child. kind interrupt is delivered before the recipient's next " +
			"tool call; normal messages produce a notice after its next tool call.",
		Schema: schema.Object(map[string]*schema.Schema{
			"recipient_pid":  {Type: "integer", Minimum: schema.Ptr(1.0)},
			"body":           {Type: "string", MaxLength: schema.Ptr(mailbox.MaxBodyChars)},
			"subject":        {Type: "string", MaxLength: schema.Ptr(mailbox.MaxSubjectChars)},
			"payload":        {Description: payloadDescription},
			"kind":           {Type: "string", Enum: []any{mailbox.KindNormal, mailbox.KindInterrupt}, Default: mailbox.KindNormal},
			"channel":        {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(mailbox.MaxLabelChars), Default: mailbox.DefaultChannel},
			"correlation_id": {Type: "string", MaxLength: schema.Ptr(mailbox.MaxLabelChars)},
			"reply_to":       {Type: "string", MaxLength: schema.Ptr(mailbox.MaxLabelChars)},
		}, "recipient_pid", "body"),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return sendMessage(sys, raw)
		},
	}
}

func sendMessage(sys tools.Mailbox, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		Recipient     int64           `json:"recipient_pid"`
		Body          string          `json:"body"`
		Subject       string          `json:"subject"`
		Payload       json.RawMessage `json:"payload"`
		Kind          string          `json:"kind"`
		Channel       string          `json:"channel"`
		CorrelationID string          `json:"correlation_id"`
		ReplyTo       string          `json:"reply_to"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("send_process_message: decode arguments: %w", err)
	}
	m, err := sys.PostMessage(mailbox.Message{
		Recipient: args.Recipient, Body: args.Body, Subject: args.Subject, Payload: args.Payload, Kind: args.Kind,
		Channel: args.Channel, CorrelationID: args.CorrelationID, ReplyTo: args.ReplyTo,
	})
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: map[string]any{"message_id": m.ID, "recipient_pid": m.Recipient, "status": m.Status}}, nil
}

func filterProps(block bool) map[string]*schema.Schema {
	props := map[string]*schema.Schema{
		"include_acked":  {Type: "boolean", Default: false, Description: "Also return acked messages (never superseded ones)."},
		"kind":           {Type: "string", Enum: []any{mailbox.KindNormal, mailbox.KindInterrupt}},
		"sender":         {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(256), Description: "process:<pid> or human:<name>."},
		"channel":        {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(mailbox.MaxLabelChars)},
		"correlation_id": {Type: "string", MaxLength: schema.Ptr(mailbox.MaxLabelChars)},
		"reply_to":       {Type: "string", MaxLength: schema.Ptr(mailbox.MaxLabelChars)},
		"message_ids":    {Type: "array", MaxItems: schema.Ptr(mailbox.MaxMessageIDs), Items: &schema.Schema{Type: "string", MinLength: schema.Ptr(1)}, Description: "Exact ids; an empty list matches nothing."},
		"limit":          {Type: "integer", Minimum: schema.Ptr(0.0), Maximum: schema.Ptr(float64(mailbox.MaxLimit)), Default: mailbox.DefaultLimit},
		"ack":            {Type: "boolean", Default: true, Description: "Mark returned unread messages acked."},
	}
	if block {
		props["block"] = &schema.Schema{Type: "boolean", Default: true, Description: "Wait durably until a matching message arrives."}
	}
	return props
}

type readArgs struct {
	IncludeAcked  bool      `json:"include_acked"`
	Kind          *string   `json:"kind"`
	Sender        *string   `json:"sender"`
	Channel       *string   `json:"channel"`
	CorrelationID *string   `json:"correlation_id"`
	ReplyTo       *string   `json:"reply_to"`
	MessageIDs    *[]string `json:"message_ids"`
	Limit         int       `json:"limit"`
	Ack           bool      `json:"ack"`
	Block         bool      `json:"block"`
}

func (a readArgs) filter() mailbox.Filter {
	return mailbox.Filter{
		IncludeAcked: a.IncludeAcked, Kind: a.Kind, Sender: a.Sender, Channel: a.Channel,
		CorrelationID: a.CorrelationID, ReplyTo: a.ReplyTo, MessageIDs: a.MessageIDs, Limit: a.Limit,
	}
}

func decodeRead(name string, raw json.RawMessage) (readArgs, error) {
	var args readArgs
	if err := json.Unmarshal(raw, &args); err != nil {
		return args, fmt.Errorf("%s: decode arguments: %w", name, err)
	}
	if err := args.filter().Validate(); err != nil {
		return args, err
	}
	return args, nil
}

func pageResult(p mailbox.Page) map[string]any {
	var cont any
	if p.Continuation != nil {
		cont = p.Continuation
	}
	return map[string]any{
		"messages": p.Messages, "acked_message_ids": p.AckedIDs, "has_more": p.HasMore,
		"omitted_count": p.OmittedCount, "continuation": cont,
	}
}

func read() *tools.Tool {
	return &tools.Tool{
		Name: "read_process_messages",
		Description: "Read your mailbox without waiting. Filters combine; ack=true (default) marks returned unread messages acked in the same commit. " +
			"has_more/continuation say how to ask for the rest (the same filters; with message_ids, the ids not yet returned). No cursor.",
		Schema: schema.Object(filterProps(false)),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return readMessages(sys, "read_process_messages", raw)
		},
	}
}

// readMessages reads a page of the caller's mailbox with the arguments raw.
func readMessages(sys tools.Mailbox, name string, raw json.RawMessage) (tools.Outcome, error) {
	args, err := decodeRead(name, raw)
	if err != nil {
		return tools.Outcome{}, err
	}
	page, err := sys.ReadMessages(args.filter(), args.Ack)
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: pageResult(page)}, nil
}

func receive() *tools.Tool {
	return &tools.Tool{
		Name: "receive_process_messages",
		Description: "Like read_process_messages, but with block=true (default) waits durably until a matching message arrives. " +
			"Use it, never repeated sleeps, to wait for a message.",
		Schema:    schema.Object(filterProps(true)),
		EndsBatch: true,
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return startReceive(sys, raw)
		},
		Resume: func(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
			return readMessages(sys, "receive_process_messages", p.Data)
		},
	}
}

// receiver is what a receive uses: the caller, whose pid tells which ids
// its queue can ever hold, and its mailbox.
type receiver interface {
	tools.Caller
	tools.Mailbox
}

func startReceive(sys receiver, raw json.RawMessage) (tools.Outcome, error) {
	args, err := decodeRead("receive_process_messages", raw)
	if err != nil {
		return tools.Outcome{}, err
	}
	f := args.filter()
	if args.Block {
		if f.MessageIDs != nil && len(*f.MessageIDs) == 0 {
			return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "message_ids: an empty list matches nothing, so block=true would wait forever")
		}
		if f.Limit == 0 {
			return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "limit: 0 returns nothing, so block=true would wait forever")
		}
		if err := ownIDs(sys.Self().PID, f); err != nil {
			return tools.Outcome{}, err
		}
	}
	found, err := sys.HasMessage(f)
	if err != nil {
		return tools.Outcome{}, err
	}
	if found || !args.Block {
		page, err := sys.ReadMessages(f, args.Ack)
		if err != nil {
			return tools.Outcome{}, err
		}
		return tools.Outcome{Result: pageResult(page)}, nil
	}
	if err := someMayArrive(sys, f); err != nil {
		return tools.Outcome{}, err
	}
	fj, err := json.Marshal(f)
	if err != nil {
		return tools.Outcome{}, fmt.Errorf("receive_process_messages: encode filter: %w", err)
	}
	kind := process.WaitMessage
	if f.Sender != nil && strings.HasPrefix(*f.Sender, mailbox.SenderHumanPrefix) {
		kind = process.WaitHuman
	}
	return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: kind, Filter: fj}, Data: raw}}, nil
}

// ownIDs refuses, for a blocking receive, an exact id that no message of
// pid's queue can ever have: one that is not an id as mailbox.FormatID
// writes it, or one of another process's queue. Such an id is a mistake
// whatever the other ids are, so it is refused even when they could match.
func ownIDs(pid int64, f mailbox.Filter) error {
	if f.MessageIDs == nil {
		return nil
	}
	for i, id := range *f.MessageIDs {
		owner, _, ok := mailbox.ParseID(id)
		if !ok {
			return tools.Errorf(tools.CodeInvalidArguments, "message_ids[%d]: %q is not a message id (msg_<pid>_<seq>, decimal without leading zeros), so block=true would wait forever for it", i, id)
		}
		if owner != pid {
			return tools.Errorf(tools.CodeInvalidArguments, "message_ids[%d]: %q is a message of process %d's queue, never of yours (pid %d), so block=true would wait forever for it", i, id, owner, pid)
		}
	}
	return nil
}

// maxReasons is how many excluded ids a refusal names one by one.
const maxReasons = 3

// someMayArrive refuses a blocking receive whose exact ids all name
// messages already in the caller's queue that f excludes (it is called once
// none matches): such a message keeps its content and only moves on from
// unread (to acked or superseded), so it never comes to match, and the
// wait would never end. While one id names a message not posted yet the
// wait stands; the ids already excluded are then skipped, as a read skips
// them.
func someMayArrive(sys tools.Mailbox, f mailbox.Filter) error {
	if f.MessageIDs == nil {
		return nil
	}
	ids := *f.MessageIDs
	var reasons []string
	for i, id := range ids {
		m, posted, err := sys.PostedMessage(id)
		if err != nil {
			return err
		}
		if !posted {
			return nil
		}
		if len(reasons) == maxReasons {
			continue
		}
		why := "does not match the other filters"
		switch {
		case m.Status == mailbox.StatusSuperseded:
			why = "was superseded by a checkpoint restore"
		case m.Status == mailbox.StatusAcked && !f.IncludeAcked:
			why = "is acked and include_acked is false"
		}
		reasons = append(reasons, fmt.Sprintf("message_ids[%d] %q %s", i, id, why))
	}
	if more := len(ids) - len(reasons); more > 0 {
		reasons = append(reasons, fmt.Sprintf("%d more alike", more))
	}
	return tools.Errorf(tools.CodeInvalidArguments, "message_ids: every id names a message already in your mailbox that this filter excludes (%s), so block=true would wait forever",
		strings.Join(reasons, "; "))
}
