package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// endpoint is a chat-completions server whose model exits at once, unless
// it is set to answer an error status or expects another model name.
type endpoint struct {
	srv    *httptest.Server
	status atomic.Int32 // non-zero: answer this status
	model  atomic.Value // non-empty: any other model is "not found"
	hits   atomic.Int32
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.model.Store("")
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		var req struct{ Model string }
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		if want := e.model.Load().(string); want != "" && req.Model != want {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"message":"The model '`+req.Model+`' does not exist","code":"model_not_found"}}`)
			return
		}
		if code := e.status.Load(); code != 0 {
			w.WriteHeader(int(code))
			io.WriteString(w, `{"error":{"message":"injected"}}`)
			return
		}
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
			"message":{"role":"assistant","content":"done","tool_calls":[{"id":"c1","type":"function",
			"function":{"name":"process_exit","arguments":"{\"message\":\"done\"}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) runArgs(dir string, extra ...string) []string {
	return append([]string{"run", "base:v0", "--goal", "g", "--dir", dir, "--provider", "openai", "--model", "m", "--base-url", e.srv.URL + "/v1"}, extra...)
}

func TestEndpointFlagsOutOfRange(t *testing.T) {
	e := newEndpoint(t)
	for _, tc := range []struct{ flag, value string }{
		{"--retry-attempts", "0"}, {"--retry-attempts", "x"}, {"--retry-max-backoff", "-1"}, {"--retry-max-backoff", "25h"},
		{"--request-timeout", "0"}, {"--request-timeout", "soon"}, {"--max-tokens", "0"}, {"--temperature", "3"},
		{"--max-tokens-field", "tokens"},
	} {
		dir := t.TempDir()
		_, stderr, code := runBin(t, e.runArgs(dir, tc.flag, tc.value)...)
		if code != exitUsage || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%s %s: exit %d, stderr %q", tc.flag, tc.value, code, stderr)
		}
	}
	if e.hits.Load() != 0 {
		t.Fatal("a refused flag reached the server")
	}
}

// A server that stays down: the run retries, then ends with the root
// waiting on its provider (exit 3) instead of failing it; resume after the
// server is back finishes the tree.
func TestUnavailableProviderWaitsThenResumes(t *testing.T) {
	e := newEndpoint(t)
	e.status.Store(503)
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, e.runArgs(dir, "--retry-attempts", "3", "--retry-max-backoff", "0.01")...)
	out := decodeOutcome(t, stdout)
	if code != exitWaiting || out["status"] != "waiting" || !strings.HasPrefix(out["reason"].(string), "provider unavailable") {
		t.Fatalf("exit %d, outcome %v\n%s", code, out, stderr)
	}
	if n := e.hits.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if strings.Count(stderr, "attempt") < 3 {
		t.Fatalf("the trace does not show each attempt:\n%s", stderr)
	}
	ps, _, _ := runBin(t, "ps", "--dir", dir, "--json")
	if !strings.Contains(ps, `"waiting_on":"provider"`) {
		t.Fatalf("ps does not show the provider wait: %s", ps)
	}
	e.status.Store(0)
	stdout, stderr, code = runBin(t, "resume", "--dir", dir)
	if out := decodeOutcome(t, stdout); code != exitOK || out["status"] != "exited" {
		t.Fatalf("resume: exit %d, outcome %v\n%s", code, out, stderr)
	}
}

// Settings that cannot work (a bad key, an unknown model) are not retried:
// the run ends at once naming the fix, and resume with the corrected flag
// continues the tree.
func TestWrongSettingsWaitForTheHost(t *testing.T) {
	e := newEndpoint(t)
	e.status.Store(401)
	dir := t.TempDir()
	stdout, _, code := runBin(t, e.runArgs(dir)...)
	if out := decodeOutcome(t, stdout); code != exitWaiting || !strings.Contains(out["reason"].(string), "authentication failed: check OPENAI_API_KEY") {
		t.Fatalf("exit %d, outcome %v", code, out)
	}
	if e.hits.Load() != 1 {
		t.Fatalf("a bad key was retried: %d attempts", e.hits.Load())
	}

	e.status.Store(0)
	e.model.Store("good")
	stdout, _, code = runBin(t, "resume", "--dir", dir)
	if out := decodeOutcome(t, stdout); code != exitWaiting || !strings.Contains(out["reason"].(string), `model "m" not found`) {
		t.Fatalf("unknown model: exit %d, outcome %v", code, out)
	}
	if _, stderr, code := runBin(t, "resume", "--dir", dir, "--retry-attempts", "0"); code != exitUsage || !strings.Contains(stderr, "--retry-attempts") {
		t.Fatalf("a bad flag on resume: exit %d, %s", code, stderr)
	}
	stdout, stderr, code := runBin(t, "resume", "--dir", dir, "--model", "good")
	if out := decodeOutcome(t, stdout); code != exitOK || out["status"] != "exited" {
		t.Fatalf("resume with the right model: exit %d, outcome %v\n%s", code, out, stderr)
	}
}
