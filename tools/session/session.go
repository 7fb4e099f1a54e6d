// Package session holds the runtime-session tools: get_current_time, sleep
// and process_exit.
package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA zone names must resolve on hosts without a zoneinfo database
	"unicode/utf8"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// DefaultMaxSleepSeconds is the Host default for sleep's maximum.
const DefaultMaxSleepSeconds = 60

// Tools returns the session family for cfg.
func Tools(cfg tools.Config) []*tools.Tool {
	return []*tools.Tool{getCurrentTime(), sleep(cfg), compactContext(), processExit()}
}

func compactContext() *tools.Tool {
	return &tools.Tool{
		Name: "compact_process_context",
		Description: "Compact your LLM context Object through context-compressor:v0 children, one per chunk, with a compare-and-swap writeback. " +
			"Call it alone, and only when your prompt shows the 'LLM context object:' heading. target_tokens is the no-op threshold and the summary goal; " +
			"preserve_recent_entries counts tail entries kept verbatim; max_chunks bounds the sequential stages (each costs a child and its model calls); " +
			"force skips only the under-target no-op. Needs read, write and materialize on the context Object; a real compaction also needs write on your " +
			"namespace, write on process:spawn, read on image:context-compressor:v0 and child, tool and LLM budget. Never pass _resume_job.",
		Schema: schema.Object(map[string]*schema.Schema{
			"target_tokens":           {Type: "integer", Minimum: schema.Ptr(256.0), Maximum: schema.Ptr(64000.0), Default: 4000},
			"preserve_recent_entries": {Type: "integer", Minimum: schema.Ptr(0.0), Maximum: schema.Ptr(128.0), Default: 8},
			"max_chunks":              {Type: "integer", Minimum: schema.Ptr(1.0), Maximum: schema.Ptr(64.0), Default: 8},
			"force":                   {Type: "boolean", Default: false},
		}),
		EndsBatch: true,
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return startCompaction(sys, raw)
		},
		Resume: func(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
			return sys.ResumeCompaction(p)
		},
	}
}

// startCompaction hands the request to the kernel, which checks the
// authority of every stage itself.
func startCompaction(sys tools.Compactor, raw json.RawMessage) (tools.Outcome, error) {
	var req tools.CompactionRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return tools.Outcome{}, fmt.Errorf("compact_process_context: decode arguments: %w", err)
	}
	return sys.StartCompaction(req)
}

func getCurrentTime() *tools.Tool {
	return &tools.Tool{
		Name:        "get_current_time",
		Description: "Read the wall clock (not a monotonic timer). Needs read on clock:now. Returns iso8601 (in the requested zone, with its offset), unix_seconds and timezone.",
		Schema: schema.Object(map[string]*schema.Schema{
			"timezone": {Type: "string", Default: "UTC", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64),
				Description: "IANA time zone name such as UTC or Asia/Shanghai."},
		}),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return currentTime(sys, raw)
		},
	}
}

func currentTime(sys tools.Caller, raw json.RawMessage) (tools.Outcome, error) {
	timezone, err := timezoneArg(raw)
	if err != nil {
		return tools.Outcome{}, fmt.Errorf("get_current_time: decode arguments: %w", err)
	}
	loc, err := LoadIANA(timezone)
	if err != nil {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "timezone: %v", err)
	}
	if err := sys.Require(authority.ClockNow, authority.Params{}); err != nil {
		return tools.Outcome{}, err
	}
	now := sys.Now().In(loc)
	return tools.Outcome{Result: map[string]any{
		"iso8601":      now.Format(time.RFC3339Nano),
		"unix_seconds": now.Unix(),
		"timezone":     timezone,
	}}, nil
}

// timezoneArg returns get_current_time's timezone argument. Arguments reach
// a tool canonical (tools.Broker.Prepare): here {"timezone":"..."}, whose
// string needs no unescaping unless it holds a backslash, so a zone's name
// is read without a JSON decoder, which would cost more than the rest of the
// call; anything else is decoded.
func timezoneArg(raw json.RawMessage) (string, error) {
	if name, ok := bytes.CutPrefix(raw, []byte(`{"timezone":"`)); ok {
		if name, ok = bytes.CutSuffix(name, []byte(`"}`)); ok && literalJSONString(name) {
			return string(name), nil
		}
	}
	var args struct {
		Timezone string `json:"timezone"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return "", err
	}
	return args.Timezone, nil
}

// literalJSONString reports whether b, between a JSON string's quotes, is
// the string's own bytes: valid UTF-8 with no quote, backslash or control
// character.
func literalJSONString(b []byte) bool {
	for _, c := range b {
		if c == '"' || c == '\\' || c < 0x20 {
			return false
		}
	}
	return utf8.Valid(b)
}

// LoadIANA resolves an IANA zone name, refusing the names Go accepts that are
// not IANA zones ("" and "Local"). Answers are kept (zones).
func LoadIANA(name string) (*time.Location, error) {
	zones.Lock()
	loc, known := zones.found[name]
	err, refused := zones.refused[name]
	zones.Unlock()
	if known || refused {
		return loc, err
	}
	loc, err = loadIANA(name)
	zones.Lock()
	switch {
	case err == nil && len(zones.found) < maxZones:
		zones.found[name] = loc
	case err != nil && len(zones.refused) < maxRefusedZones:
		zones.refused[name] = err
	}
	zones.Unlock()
	return loc, err
}

// zones keeps what LoadIANA answered for each name: time.LoadLocation reads
// and parses the zone's file at every call, and get_current_time runs
// inside a commit, under the store's write lock, where no file is read.
// Zones and refusals are bounded apart, so that made-up names cannot take
// the room of real ones (the IANA database has about 600); past a bound, a
// name is resolved at each call.
var zones = struct {
	sync.Mutex
	found   map[string]*time.Location
	refused map[string]error
}{found: map[string]*time.Location{}, refused: map[string]error{}}

const (
	maxZones        = 1024
	maxRefusedZones = 256
)

func loadIANA(name string) (*time.Location, error) {
	if name == "" || name == "Local" || strings.ContainsAny(name, " \\") {
		return nil, fmt.Errorf("%q is not an IANA time zone name (for example UTC or Asia/Shanghai)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone name (for example UTC or Asia/Shanghai)", name)
	}
	return loc, nil
}

type sleepData struct {
	RequestedSeconds float64 `json:"requested_seconds"`
}

func sleep(cfg tools.Config) *tools.Tool {
	max := cfg.MaxSleepSeconds
	if max <= 0 {
		max = DefaultMaxSleepSeconds
	}
	return &tools.Tool{
		Name: "sleep",
		Description: fmt.Sprintf("Wait once for a known delay of 0..%g seconds. Needs read on clock:sleep. "+
			"Returns requested_seconds and the measured elapsed_seconds. Never use it to wait for an event.", max),
		Schema: schema.Object(map[string]*schema.Schema{
			"seconds": {Type: "number", Minimum: schema.Ptr(0.0), Maximum: schema.Ptr(max),
				Description: fmt.Sprintf("Finite delay in seconds, 0..%g.", max)},
		}, "seconds"),
		EndsBatch: true,
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return startSleep(sys, raw)
		},
		Resume: func(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
			return endSleep(sys, p)
		},
	}
}

func startSleep(sys tools.Caller, raw json.RawMessage) (tools.Outcome, error) {
	var args sleepData
	if err := json.Unmarshal(raw, &struct {
		Seconds *float64 `json:"seconds"`
	}{&args.RequestedSeconds}); err != nil {
		return tools.Outcome{}, fmt.Errorf("sleep: decode arguments: %w", err)
	}
	if err := sys.Require(authority.ClockSleep, authority.Params{}); err != nil {
		return tools.Outcome{}, err
	}
	d := time.Duration(args.RequestedSeconds * float64(time.Second))
	data, _ := json.Marshal(args)
	return tools.Outcome{Block: &tools.Block{
		Wait: process.Wait{Kind: process.WaitTimer, Until: sys.Now().Add(d)},
		Data: data,
	}}, nil
}

func endSleep(sys tools.Caller, p tools.Pending) (tools.Outcome, error) {
	var d sleepData
	if err := json.Unmarshal(p.Data, &d); err != nil {
		return tools.Outcome{}, fmt.Errorf("sleep: decode pending action %s: %w", p.ID, err)
	}
	now := sys.Now()
	if p.Recovered {
		// Not a success: nothing certifies the delay, so it is not an observed
		// successful call that completion evidence could cite.
		return tools.Outcome{}, &tools.Error{Code: tools.CodeSettlementUnknown, EffectStarted: true, Message: fmt.Sprintf(
			"the runtime restarted during this delay of %g seconds (now %s); it may or may not have fully elapsed. "+
				"Re-read the time and state; do not blindly sleep again", d.RequestedSeconds, now.UTC().Format(time.RFC3339Nano))}
	}
	elapsed := now.Sub(p.StartedAt).Seconds()
	return tools.Outcome{Result: map[string]any{
		"requested_seconds": d.RequestedSeconds,
		"elapsed_seconds":   math.Round(elapsed*1e6) / 1e6,
	}}, nil
}

func processExit() *tools.Tool {
	return &tools.Tool{
		Name: "process_exit",
		Description: "Finish this process; call it alone, after all other work. Result precedence: result_oid (an existing readable Object) " +
			"overrides payload, payload (structured final summary) overrides message, message becomes {\"message\": ...}; none gives result_oid null " +
			"on a one-phase image. review_token and completion_evidence are only for images with a cumulative completion review. " +
			"Only status \"exited\" means the process ended.",
		Schema: schema.Object(map[string]*schema.Schema{
			"result_oid":          {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64), Description: "Reuse an existing readable Object as the result."},
			"payload":             {Description: "Structured final summary (any JSON value) stored as the result Object."},
			"message":             {Type: "string", MaxLength: schema.Ptr(32000), Description: "Internal result text, stored as {\"message\": ...}; not Human output."},
			"review_token":        {Type: "string", Description: "Token of the latest completion review (gated images only)."},
			"completion_evidence": {Type: "object", Description: "Evidence for the completion review (gated images only)."},
		}),
		EndsBatch: true,
		Uncharged: true,
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return exit(sys, raw)
		},
	}
}

// exitSys is what process_exit uses: the result Object it names or creates,
// and the completion review of a gated image.
type exitSys interface {
	tools.Caller
	tools.ObjectStore
	tools.Reviewer
}

type exitArgs struct {
	ResultOID          *string         `json:"result_oid"`
	Payload            json.RawMessage `json:"payload"`
	Message            *string         `json:"message"`
	ReviewToken        *string         `json:"review_token"`
	CompletionEvidence json.RawMessage `json:"completion_evidence"`
}

func exit(sys exitSys, raw json.RawMessage) (tools.Outcome, error) {
	var args exitArgs
	if err := json.Unmarshal(raw, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("process_exit: decode arguments: %w", err)
	}
	self := sys.Self()
	exit := &tools.Exit{}
	if self.Gated {
		review, err := sys.CompletionReview(deref(args.ReviewToken), args.CompletionEvidence)
		if err != nil {
			return tools.Outcome{}, err
		}
		if !review.Exit {
			return tools.Outcome{Result: map[string]any{
				"status":            "completion_review_required",
				"completion_review": review.Review,
			}}, nil
		}
		exit.Evidence, exit.EvidenceSHA256 = review.EvidenceJSON, review.EvidenceSHA256
	} else if args.ReviewToken != nil || args.CompletionEvidence != nil {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments,
			"review_token/completion_evidence: only for images with completion_gate cumulative_review; image %s exits in one phase", self.Image)
	}
	switch {
	case args.ResultOID != nil:
		meta, err := tools.StatAuthorized(sys, authority.ObjectRead, *args.ResultOID)
		switch {
		case errors.Is(err, objects.ErrNotFound):
			return tools.Outcome{}, tools.Errorf(tools.CodeNotFound, "result_oid: %s: %v", *args.ResultOID, err)
		case err != nil:
			return tools.Outcome{}, fmt.Errorf("result_oid: %w", err)
		}
		exit.ResultOID = meta.OID
	case len(args.Payload) > 0 && string(args.Payload) != "null":
		meta, err := sys.CreateResult(args.Payload)
		if err != nil {
			return tools.Outcome{}, err
		}
		exit.ResultOID = meta.OID
	case args.Message != nil:
		// Encoded as arguments are (schema.Marshal): a message's <, > and &
		// stay one byte each against the result's bound in bytes.
		data, _ := schema.Marshal(map[string]string{"message": *args.Message})
		meta, err := sys.CreateResult(data)
		if err != nil {
			return tools.Outcome{}, err
		}
		exit.ResultOID = meta.OID
	}
	var resultOID any
	if exit.ResultOID != "" {
		resultOID = exit.ResultOID
	}
	return tools.Outcome{
		Result: map[string]any{"status": "exited", "result_oid": resultOID},
		Exit:   exit,
	}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
