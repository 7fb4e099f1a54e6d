package crashtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGKILL while the root backs off from a server that asked it to retry
// later: the reopened runtime keeps the backoff's time instead of asking at
// once or starting over, and the tree finishes once the server is back.
func TestKillDuringProviderBackoff(t *testing.T) {
	const retryAfter = 3 * time.Second
	var (
		mu   sync.Mutex
		hits []time.Time
		down = true
	)
	firstHit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		hits = append(hits, time.Now())
		n, failing := len(hits), down
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if failing {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"loading the model"}}`)
			if n == 1 {
				close(firstHit)
			}
			return
		}
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
			"message":{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
			"function":{"name":"process_exit","arguments":"{\"message\":\"after the backoff\"}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)
	}))
	defer srv.Close()

	dir := filepath.Join(t.TempDir(), "rt")
	run := exec.Command(libosBin, "run", "base:v0", "--goal", "wait for the server", "--dir", dir,
		"--provider", "openai", "--model", "m", "--base-url", srv.URL+"/v1")
	run.Env = cleanEnv()
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstHit:
	case <-time.After(subprocessBound):
		run.Process.Kill()
		t.Fatal("the run never called the server")
	}
	// The failed attempt and the wait commit right after the answer; give
	// them a moment, then cut the power.
	time.Sleep(300 * time.Millisecond)
	run.Process.Signal(syscall.SIGKILL)
	run.Wait()
	killedAt := time.Now()

	var ps []struct {
		Status      string     `json:"status"`
		WaitingOn   *string    `json:"waiting_on"`
		NextAttempt *time.Time `json:"next_attempt_at"`
	}
	out, err := exec.Command(libosBin, "ps", "--dir", dir, "--json").Output()
	if err != nil || json.Unmarshal(out, &ps) != nil || len(ps) != 1 {
		t.Fatalf("ps after the kill: %v %s", err, out)
	}
	if ps[0].Status != "waiting" || ps[0].WaitingOn == nil || *ps[0].WaitingOn != "provider" || ps[0].NextAttempt == nil {
		t.Fatalf("after the kill the root is %s on %v (next %v), want waiting on its provider", ps[0].Status, ps[0].WaitingOn, ps[0].NextAttempt)
	}
	if d := ps[0].NextAttempt.Sub(killedAt); d > retryAfter {
		t.Fatalf("next attempt %s after the kill, beyond the server's Retry-After", d)
	}

	mu.Lock()
	down = false
	mu.Unlock()
	resume := exec.Command(libosBin, "resume", "--dir", dir)
	resume.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	resume.Stdout, resume.Stderr = &stdout, &stderr
	if err := resume.Run(); err != nil {
		t.Fatalf("resume: %v\n%s", err, stderr.String())
	}
	var outcome struct{ Status, Result json.RawMessage }
	if err := json.Unmarshal(stdout.Bytes(), &outcome); err != nil || string(outcome.Status) != `"exited"` {
		t.Fatalf("resume printed %s\n%s", stdout.String(), stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != 2 {
		t.Fatalf("%d calls, want the failed one and one after the backoff", len(hits))
	}
	// The second call waited out the backoff that was durable before the kill.
	if hits[1].Before(ps[0].NextAttempt.Add(-50 * time.Millisecond)) {
		t.Fatalf("the resumed runtime asked at %s, before the recorded next attempt %s", hits[1].Format(time.StampMilli), ps[0].NextAttempt.Format(time.StampMilli))
	}
}
