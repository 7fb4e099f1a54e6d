package crashtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/libos/libos/llm"
)

// model is an OpenAI-compatible chat-completions server that answers from a
// replay script, for the binary under test (run with --provider openai).
//
// It differs from the built-in replay provider (--script) in how it picks
// the scripted turn: one past the latest turn named by a call id in the
// request (the replay names calls call_<pid>_<turn>_<index>), not the
// kernel's turn counter. After a crash that left a provider call of unknown
// settlement, the kernel advances its turn counter and tells the process
// that its previous turn was interrupted and none of its tool calls ran; a
// real model reacts by doing that turn's work again, and so does this one,
// because an interrupted turn left no call in the context. With the
// built-in replay the process would skip the scripted turn, so a crashed
// run could not end like an uninterrupted one. Call ids survive a
// compaction: the compacting call and its result stay after the summary.
//
// It also records every tool result each process was shown, so a test can
// check that all of them are durable evidence.
type model struct {
	replay *llm.Replay
	entry  entryFunc
	srv    *httptest.Server

	mu sync.Mutex
	// images maps pid -> the image its requests name, for its script entry.
	images map[int64]string
	// seen maps pid -> tool_call_id -> the tool result content a request showed.
	seen map[int64]map[string]string
	// problems are requests the model could not answer or that showed a
	// call's result with two different contents.
	problems []string
	// gates hold the answer to a turn until another turn's request has
	// arrived, to order two processes deterministically.
	gates    map[turnKey]turnKey
	arrivals map[turnKey]chan struct{}
	requests int
	// interrupted counts requests that retry a turn the kernel reported
	// interrupted.
	interrupted int
}

// interruptedPrefix starts the notice the kernel adds after a quantum of
// unknown settlement; the model only counts such requests.
const interruptedPrefix = "(runtime notice) Your previous turn was interrupted"

var processLine = regexp.MustCompile(`Process: pid (\d+), image ([^,\s]+), namespace [^,\s]+, goal object ([0-9a-f-]+)\.`)

// entryFunc maps a process to its index among the script entries of its
// image; false for a process the scenario does not expect.
type entryFunc func(pid int64, image string) (int, bool)

// newModel serves script to the processes entry knows.
func newModel(t *testing.T, script string, entry entryFunc) *model {
	t.Helper()
	s, err := llm.LoadScript(script)
	if err != nil {
		t.Fatalf("load scenario script: %v", err)
	}
	m := &model{entry: entry, images: map[int64]string{}, seen: map[int64]map[string]string{},
		gates: map[turnKey]turnKey{}, arrivals: map[turnKey]chan struct{}{}}
	if m.replay, err = llm.NewReplay(s, m); err != nil {
		t.Fatalf("compile scenario script: %v", err)
	}
	m.srv = httptest.NewServer(m)
	t.Cleanup(m.srv.Close)
	return m
}

// baseURL is what the binary is given as --base-url.
func (m *model) baseURL() string { return m.srv.URL + "/v1" }

func (m *model) problem(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	m.mu.Lock()
	m.problems = append(m.problems, msg)
	m.mu.Unlock()
	return msg
}

// refuse answers with a client error: the adapter reports it as a permanent
// rejection and the kernel fails the process with the message as reason.
func refuse(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	var creq openai.ChatCompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&creq); err != nil {
		// A client killed while sending leaves a truncated body; nobody
		// reads the answer.
		refuse(w, fmt.Sprintf("decode request: %v", err))
		return
	}
	req, err := m.request(&creq)
	if err != nil {
		refuse(w, m.problem("%v", err))
		return
	}
	if err := m.hold(r, turnKey{req.Process.PID, req.Turn}); err != nil {
		if r.Context().Err() == nil {
			refuse(w, m.problem("%v", err))
		}
		return
	}
	resp, err := m.replay.Complete(r.Context(), req)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone: killed mid-call
		}
		refuse(w, m.problem("pid %d turn %d: %v", req.Process.PID, req.Turn, err))
		return
	}
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: resp.Text}
	for _, tc := range resp.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{
			ID: tc.ID, Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: tc.Name, Arguments: string(tc.Arguments)},
		})
	}
	out := openai.ChatCompletionResponse{
		ID: fmt.Sprintf("crash-%d-%d", req.Process.PID, req.Turn), Object: "chat.completion", Model: resp.Model,
		Choices: []openai.ChatCompletionChoice{{Index: 0, Message: msg, FinishReason: openai.FinishReason(resp.FinishReason)}},
		Usage: openai.Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens,
			TotalTokens: resp.Usage.PromptTokens + resp.Usage.CompletionTokens},
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// SpawnIndex is the scenario's script entry of pid, for the replay.
func (m *model) SpawnIndex(pid int64) (int, error) {
	m.mu.Lock()
	image := m.images[pid]
	m.mu.Unlock()
	index, ok := m.entry(pid, image)
	if !ok {
		return 0, fmt.Errorf("pid %d (image %s) is not a process of the scenario", pid, image)
	}
	return index, nil
}

// request turns a chat-completions request back into the llm.Request the
// replay answers, and records the tool results it shows.
func (m *model) request(creq *openai.ChatCompletionRequest) (llm.Request, error) {
	var req llm.Request
	if len(creq.Messages) == 0 || creq.Messages[0].Role != openai.ChatMessageRoleSystem {
		return req, fmt.Errorf("request without a system message")
	}
	match := processLine.FindStringSubmatch(creq.Messages[0].Content)
	if match == nil {
		return req, fmt.Errorf("system message names no process: %q", creq.Messages[0].Content)
	}
	pid, _ := strconv.ParseInt(match[1], 10, 64)
	if _, ok := m.entry(pid, match[2]); !ok {
		return req, fmt.Errorf("pid %d (image %s) is not a process of the scenario", pid, match[2])
	}
	m.mu.Lock()
	m.images[pid] = match[2]
	m.mu.Unlock()
	req.Process = llm.ProcessInfo{PID: pid, Image: match[2], GoalOID: match[3]}
	interrupted := false
	tools := map[string]string{}
	callPrefix := fmt.Sprintf("call_%d_", pid)
	for _, cm := range creq.Messages {
		msg := llm.Message{Role: llm.Role(cm.Role), Content: cm.Content, ToolCallID: cm.ToolCallID, Name: cm.Name}
		for _, tc := range cm.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)})
			if turn, ok := scriptedTurn(callPrefix, tc.ID); ok && turn >= req.Turn {
				req.Turn = turn + 1
			}
		}
		switch msg.Role {
		case llm.RoleAssistant:
			interrupted = false
		case llm.RoleTool:
			tools[msg.ToolCallID] = msg.Content
		case llm.RoleUser:
			if strings.HasPrefix(msg.Content, interruptedPrefix) {
				interrupted = true
			}
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range creq.Tools {
		if t.Function == nil {
			continue
		}
		params, err := json.Marshal(t.Function.Parameters)
		if err != nil {
			return req, fmt.Errorf("tool %s parameters: %w", t.Function.Name, err)
		}
		req.Tools = append(req.Tools, llm.ToolSchema{Name: t.Function.Name, Description: t.Function.Description, Parameters: params})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	if interrupted {
		m.interrupted++
	}
	seen := m.seen[pid]
	if seen == nil {
		seen = map[string]string{}
		m.seen[pid] = seen
	}
	for id, content := range tools {
		if prev, ok := seen[id]; ok && prev != content {
			m.problems = append(m.problems, fmt.Sprintf("pid %d was shown two results for call %s:\n%s\n%s", pid, id, prev, content))
		}
		seen[id] = content
	}
	return req, nil
}

// scriptedTurn reads the turn out of a replay call id of one process
// (prefix is "call_<pid>_").
func scriptedTurn(prefix, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return 0, false
	}
	turn, _, ok := strings.Cut(rest, "_")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(turn)
	return n, err == nil
}

// turnKey names one scripted turn of one process.
type turnKey struct {
	pid  int64
	turn int
}

func (k turnKey) String() string { return fmt.Sprintf("pid %d turn %d", k.pid, k.turn) }

// gate makes the answer to turn wait until a request for after arrives.
func (m *model) gate(turn, after turnKey) {
	m.mu.Lock()
	m.gates[turn] = after
	m.mu.Unlock()
}

func (m *model) arrival(k turnKey) chan struct{} {
	ch, ok := m.arrivals[k]
	if !ok {
		ch = make(chan struct{})
		m.arrivals[k] = ch
	}
	return ch
}

// hold records that the request for k arrived and waits for k's gate, if
// it has one: another process's progress, bounded generously.
func (m *model) hold(r *http.Request, k turnKey) error {
	m.mu.Lock()
	arrived := m.arrival(k)
	select {
	case <-arrived:
	default:
		close(arrived)
	}
	after, gated := m.gates[k]
	var wait chan struct{}
	if gated {
		wait = m.arrival(after)
	}
	m.mu.Unlock()
	if !gated {
		return nil
	}
	bound := time.NewTimer(subprocessBound)
	defer bound.Stop()
	select {
	case <-wait:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	case <-bound.C:
		return fmt.Errorf("the answer to %s waited %s for a request for %s", k, subprocessBound, after)
	}
}

// shown returns a copy of the tool results each process was shown.
func (m *model) shown() map[int64]map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int64]map[string]string, len(m.seen))
	for pid, calls := range m.seen {
		c := make(map[string]string, len(calls))
		for id, content := range calls {
			c[id] = content
		}
		out[pid] = c
	}
	return out
}

func (m *model) stats() (requests, interrupted int, problems []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests, m.interrupted, append([]string(nil), m.problems...)
}
