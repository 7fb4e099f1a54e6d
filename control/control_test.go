package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
)

// harness is a runtime on a temporary directory.
type harness struct {
	dir string
	rt  *kernel.Runtime
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	rt, err := kernel.Open(dir, kernel.Options{Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), true)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &harness{dir: dir, rt: rt}
}

// serveTestControl serves h's runtime with cfg and stops the server when
// the test ends.
func serveTestControl(t *testing.T, h *harness, cfg config) func() {
	t.Helper()
	stop, err := serve(h.rt, cfg)
	if err != nil {
		t.Fatalf("serve control: %v", err)
	}
	t.Cleanup(stop)
	return stop
}

// dialRaw opens a bare connection to h's control socket.
func dialRaw(t *testing.T, h *harness) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", filepath.Join(h.dir, SocketName))
	if err != nil {
		t.Fatalf("dial control socket: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readAnswer reads one response and then expects the server to close the
// connection; the bound is generous because it waits on real sockets.
func readAnswer(t *testing.T, conn net.Conn) Response {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	dec := json.NewDecoder(conn)
	var resp Response
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("read control response: %v", err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("the server must close the connection after its answer; read gave %v", err)
	}
	return resp
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func TestControlPeerAllowedRule(t *testing.T) {
	cases := []struct {
		name string
		cred peerCred
		uid  int
		want bool
	}{
		{"same uid", peerCred{pid: 42, uid: 1000, gid: 1000}, 1000, true},
		{"same uid, other gid", peerCred{pid: 42, uid: 1000, gid: 0}, 1000, true},
		{"another user", peerCred{pid: 42, uid: 1001, gid: 1000}, 1000, false},
		{"root is another user too", peerCred{pid: 1, uid: 0, gid: 0}, 1000, false},
		{"a root runtime admits root", peerCred{pid: 1, uid: 0, gid: 0}, 0, true},
		{"no uid admits no one", peerCred{uid: 0}, -1, false},
	}
	for _, c := range cases {
		if got := peerAllowed(c.cred, c.uid); got != c.want {
			t.Errorf("%s: peerAllowed(%+v, %d) = %v, want %v", c.name, c.cred, c.uid, got, c.want)
		}
	}
}

func TestControlPeerCredOfARealConnection(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	cred, err := unixPeerCred(server.(*net.UnixConn))
	if runtime.GOOS != "linux" {
		if !errors.Is(err, errPeerCredUnsupported) {
			t.Fatalf("off Linux the credential is unsupported, got %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("peer credentials: %v", err)
	}
	if int(cred.uid) != os.Getuid() || int(cred.pid) != os.Getpid() {
		t.Fatalf("peer credential %+v; want uid %d pid %d", cred, os.Getuid(), os.Getpid())
	}
	if !peerAllowed(cred, os.Getuid()) {
		t.Fatal("a peer of the runtime's own uid must be allowed")
	}
}

func TestControlSameUIDPeerIsServed(t *testing.T) {
	h := newHarness(t)
	serveTestControl(t, h, defaultConfig())
	resp, err := Dial(context.Background(), h.dir, Request{Op: "ps"}, 5*time.Second)
	if err != nil || resp.Error != "" {
		t.Fatalf("ps from the runtime's own uid: %v %q", err, resp.Error)
	}
}

func TestControlOtherUIDPeerIsRefused(t *testing.T) {
	h := newHarness(t)
	cfg := defaultConfig()
	cfg.uid = os.Getuid() + 1 // this test process now counts as another user
	serveTestControl(t, h, cfg)
	resp := readAnswer(t, dialRaw(t, h))
	if runtime.GOOS != "linux" {
		// Without peer credentials only the socket's mode protects it.
		if resp.Error == "" {
			return
		}
	}
	if !strings.Contains(resp.Error, "refused") || !strings.Contains(resp.Error, "uid") {
		t.Fatalf("a peer of another uid must be refused, got %+v", resp)
	}
}

func TestRequestTooLarge(t *testing.T) {
	h := newHarness(t)
	serveTestControl(t, h, defaultConfig())
	conn := dialRaw(t, h)

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	// 17 MiB of one message body, written from one reused chunk so that the
	// client itself allocates next to nothing.
	const total = 17 << 20
	written := make(chan error, 1)
	go func() {
		conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, `{"op":"send","to":1,"from":"x","body":"`); err != nil {
			written <- err
			return
		}
		chunk := []byte(strings.Repeat("a", 1<<20))
		for n := 0; n < total; n += len(chunk) {
			if _, err := conn.Write(chunk); err != nil {
				written <- err
				return
			}
		}
		_, err := io.WriteString(conn, "\"}\n")
		written <- err
	}()
	resp := readAnswer(t, conn)
	if !strings.Contains(resp.Error, "larger than") || !strings.Contains(resp.Error, "16 MiB") {
		t.Fatalf("a 17 MiB request must be refused with a clear error, got %+v", resp)
	}
	if err := <-written; err == nil {
		t.Fatal("the server must close the connection instead of reading the rest of the request")
	}

	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The server buffers at most the bound (a decoder's buffer may reach
	// about twice it while growing); reading the whole stream, or more,
	// would cost far more.
	grown := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MiB while refusing", grown>>20)
	if grown > 150<<20 {
		t.Fatalf("serving one oversized request allocated %d MiB", grown>>20)
	}
	// The refusal ends only that connection.
	if resp, err := Dial(context.Background(), h.dir, Request{Op: "ps"}, 5*time.Second); err != nil || resp.Error != "" {
		t.Fatalf("ps after the refusal: %v %q", err, resp.Error)
	}
}

func TestControlDialRefusesAnOversizedRequest(t *testing.T) {
	// No server: the client refuses before it connects.
	big := Request{Op: "send", To: 1, Body: strings.Repeat("a", MaxRequest+1)}
	_, err := Dial(context.Background(), t.TempDir(), big, 0)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Dial of a 16 MiB+ request: %v", err)
	}
}

func TestControlConnectionBound(t *testing.T) {
	h := newHarness(t)
	cfg := defaultConfig()
	cfg.maxConns = 2
	cfg.readTimeout = time.Minute // the idle connections outlive the test; stop closes them
	serveTestControl(t, h, cfg)

	idle := []net.Conn{dialRaw(t, h), dialRaw(t, h)}
	// The server takes connections in order: these two hold the only slots,
	// so a third is refused at once, not made to wait.
	resp := readAnswer(t, dialRaw(t, h))
	if !strings.Contains(resp.Error, "busy") || !strings.Contains(resp.Error, "2 connections") {
		t.Fatalf("the refusal must say why: %+v", resp)
	}
	// A slot freed by a client that leaves is served again.
	idle[0].Close()
	waitUntil(t, func() bool {
		resp, err := Dial(context.Background(), h.dir, Request{Op: "ps"}, time.Second)
		return err == nil && resp.Error == ""
	})
}

func TestControlIdleConnectionTimesOut(t *testing.T) {
	h := newHarness(t)
	cfg := defaultConfig()
	cfg.readTimeout = 100 * time.Millisecond
	serveTestControl(t, h, cfg)

	silent := dialRaw(t, h)
	if resp := readAnswer(t, silent); !strings.Contains(resp.Error, "no request within 100ms") {
		t.Fatalf("a silent connection: %+v", resp)
	}
	// A request that starts and stalls is cut off the same way.
	stalled := dialRaw(t, h)
	if _, err := io.WriteString(stalled, `{"op":"p`); err != nil {
		t.Fatal(err)
	}
	if resp := readAnswer(t, stalled); !strings.Contains(resp.Error, "no request within") {
		t.Fatalf("a stalled request: %+v", resp)
	}
}

func TestControlStopEndsIdleConnections(t *testing.T) {
	h := newHarness(t)
	cfg := defaultConfig()
	cfg.readTimeout = time.Hour
	stop := serveTestControl(t, h, cfg)
	conn := dialRaw(t, h)
	// The connection is being served once a request on another one is.
	if resp, err := Dial(context.Background(), h.dir, Request{Op: "ps"}, 5*time.Second); err != nil || resp.Error != "" {
		t.Fatalf("ps: %v %q", err, resp.Error)
	}
	done := make(chan struct{})
	go func() {
		stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop waited on an idle connection")
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the idle connection must be closed by stop, read gave %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, SocketName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket file must be removed: %v", err)
	}
}

// A request being handled when the server stops is answered: a kill of a
// run's root ends the run, which stops the server, and the kill must still
// report that it was done rather than a cut connection.
func TestControlStopAnswersARequestBeingHandled(t *testing.T) {
	h := newHarness(t)
	cfg := defaultConfig()
	handling := make(chan struct{})
	cfg.handle = func(k *kernel.Runtime, req Request) Response {
		close(handling)
		// Go on only once stop has closed the listener, and has had time
		// to close the connections too. (No t.Fatal here: this is the
		// server's goroutine; a stop that never comes fails the test below.)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			c, err := net.Dial("unix", filepath.Join(h.dir, SocketName))
			if err != nil {
				break
			}
			c.Close()
		}
		time.Sleep(100 * time.Millisecond)
		return Handle(k, req)
	}
	stop := serveTestControl(t, h, cfg)
	answered := make(chan Response, 1)
	go func() {
		resp, err := Dial(context.Background(), h.dir, Request{Op: "ps"}, 5*time.Second)
		if err != nil {
			resp.Error = "dial: " + err.Error()
		}
		answered <- resp
	}()
	<-handling
	stop()
	if resp := <-answered; resp.Error != "" {
		t.Fatalf("a request handled while the server stopped was not answered: %s", resp.Error)
	}
}

// waitUntil polls cond, which observes real socket behaviour, with a
// generous bound.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every read operation answers from the runtime; errors name what is wrong.
func TestHandleReadOps(t *testing.T) {
	h := newHarness(t)
	script, err := llm.ParseScript([]byte(`
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	replay, err := llm.NewReplay(script, h.rt)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.SetProvider(replay)
	pid, err := h.rt.Spawn(kernel.SpawnSpec{Image: "base:v0", Goal: "end"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := h.rt.Process(pid)
	if err != nil || info.ResultOID == "" {
		t.Fatalf("process: %+v %v", info, err)
	}
	for _, req := range []Request{
		{Op: "ps"}, {Op: "inspect", PID: pid}, {Op: "logs", PID: pid}, {Op: "objects", PID: pid}, {Op: "messages", PID: pid, All: true},
		{Op: "context", PID: pid}, {Op: "goal_get", PID: pid}, {Op: "object", OID: info.ResultOID}, {Op: "approvals"},
		{Op: "checkpoint_list", PID: pid},
	} {
		resp := Handle(h.rt, req)
		if resp.Error != "" || (len(resp.Result) == 0 && resp.Processes == nil) || !ReadOnlyOps[req.Op] {
			t.Errorf("%s: %+v", req.Op, resp)
		}
	}
	if resp := Handle(h.rt, Request{Op: "inspect", PID: 5}); !strings.Contains(resp.Error, "pid 5") {
		t.Fatalf("unknown pid: %+v", resp)
	}
	if resp := Handle(h.rt, Request{Op: "frob"}); !strings.Contains(resp.Error, "inspect") {
		t.Fatalf("unknown op: %+v", resp)
	}
	for _, op := range Ops {
		if ReadOnlyOps[op] == (op == "send" || op == "signal" || op == "approve" || op == "deny" || op == "goal_set" ||
			op == "checkpoint_create" || op == "checkpoint_restore" || op == "checkpoint_fork") {
			t.Errorf("op %s: read-only %v", op, ReadOnlyOps[op])
		}
	}
}

// spawnIdle spawns a process that never runs (no loop is started), so
// what a request did to it can be read back.
func spawnIdle(t *testing.T, h *harness) int64 {
	t.Helper()
	pid, err := h.rt.Spawn(kernel.SpawnSpec{Image: "base:v0", Goal: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A request of exactly the bound, with its newline, is served; one byte
// more is refused. Client and server count the same bytes.
func TestControlRequestOfExactlyTheBound(t *testing.T) {
	for _, c := range []struct {
		pad    int
		served bool
	}{{0, true}, {1, false}} {
		body := `{"op":"ps","goal":"` + strings.Repeat("g", 100+c.pad) + `"}`
		limit := int64(len(body) - c.pad)
		_, err := readRequest(strings.NewReader(body+"\n"), limit)
		if served := err == nil; served != c.served {
			t.Errorf("a request of %d bytes against a bound of %d: %v", len(body), limit, err)
		}
		if !c.served && (err == nil || !strings.Contains(err.Error(), "larger than")) {
			t.Errorf("over the bound: %v", err)
		}
	}

	h := newHarness(t)
	serveTestControl(t, h, defaultConfig())
	req := Request{Op: "ps"}
	empty, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	req.Goal = strings.Repeat("g", MaxRequest-len(empty)-len(`,"goal":""`))
	if body, _ := json.Marshal(req); len(body) != MaxRequest {
		t.Fatalf("the request is %d bytes, want %d", len(body), MaxRequest)
	}
	resp, err := Dial(context.Background(), h.dir, req, 5*time.Second)
	if err != nil || resp.Error != "" {
		t.Fatalf("a request of exactly MaxRequest bytes: %v %q", err, resp.Error)
	}
}

// Dial gives up as soon as its context ends, whether it is still waiting
// for the socket or for the answer.
func TestControlDialHonoursItsContext(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	end := make(chan struct{})
	defer close(end)
	go func() {
		// Accept and never answer.
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		<-end
		conn.Close()
	}()
	for _, c := range []struct{ name, dir string }{{"waiting for the answer", dir}, {"waiting for the socket", t.TempDir()}} {
		name, d := c.name, c.dir
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := Dial(ctx, d, Request{Op: "ps"}, time.Minute)
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Dial returned %v, want context.Canceled", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Dial did not return within 5s of its context's end", name)
		}
	}
}

// A request with a field Request does not have, or with anything after it,
// is refused as a whole, naming what is wrong; nothing of it is done.
func TestControlRefusesUnknownFieldsAndTrailingRequests(t *testing.T) {
	h := newHarness(t)
	serveTestControl(t, h, defaultConfig())
	pid := spawnIdle(t, h)
	for _, c := range []struct{ raw, want string }{
		{fmt.Sprintf(`{"op":"send","to":%d,"from":"ana","body":"stop","interupt":true}`+"\n", pid), `unknown field "interupt"`},
		{fmt.Sprintf(`{"op":"ps"} {"op":"signal","pid":%d,"signal":"kill"}`+"\n", pid), `trailing data after the request ("{\"op\":\"signal\"`},
		{fmt.Sprintf(`{"op":"ps"}`+"\n"+`{"op":"signal","pid":%d,"signal":"kill"}`+"\n", pid), `trailing data`},
	} {
		conn := dialRaw(t, h)
		if _, err := io.WriteString(conn, c.raw); err != nil {
			t.Fatal(err)
		}
		if resp := readAnswer(t, conn); !strings.Contains(resp.Error, c.want) || resp.Processes != nil {
			t.Errorf("%q: %+v; want an error containing %s", c.raw, resp, c.want)
		}
	}
	msgs, err := h.rt.Messages(pid, true)
	if err != nil || len(msgs.Messages) != 0 {
		t.Fatalf("a refused send posted: %+v %v", msgs, err)
	}
	if info, err := h.rt.Process(pid); err != nil || info.Status.Terminal() {
		t.Fatalf("a refused trailing signal ran: %+v %v", info, err)
	}
}

// A send's errors name the request's fields: from, to and body.
func TestControlSendNamesItsFields(t *testing.T) {
	h := newHarness(t)
	pid := spawnIdle(t, h)
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Op: "send", To: 0, From: "ana", Body: "b"}, "to: "},
		{Request{Op: "send", To: pid + 10, From: "ana", Body: "b"}, "to: "},
		{Request{Op: "send", To: pid, From: strings.Repeat("a", mailbox.MaxHumanNameChars+1), Body: "b"}, "from: at most"},
		{Request{Op: "send", To: pid, From: "an\x01a", Body: "b"}, "from: "},
	} {
		resp := Handle(h.rt, c.req)
		if !strings.HasPrefix(resp.Error, c.want) || strings.Contains(resp.Error, "sender") || strings.Contains(resp.Error, "recipient") {
			t.Errorf("to %d from %.10q: %q; want it to start with %q", c.req.To, c.req.From, resp.Error, c.want)
		}
	}
	// A missing pid is said as every other command says it.
	if resp, want := Handle(h.rt, Request{Op: "send", To: pid + 10, From: "ana", Body: "b"}), fmt.Sprintf("to: no such process: pid %d", pid+10); resp.Error != want {
		t.Errorf("a send to a missing pid: %q, want %q", resp.Error, want)
	}
	// An empty body is refused, naming it, and nothing is posted.
	for _, body := range []string{"", " \n\t"} {
		if resp := Handle(h.rt, Request{Op: "send", To: pid, From: "ana", Body: body}); resp.Error != "body: must not be empty or only white space" || resp.Message != nil {
			t.Errorf("a send of %q: %+v", body, resp)
		}
	}
	if msgs, err := h.rt.Messages(pid, true); err != nil || len(msgs.Messages) != 0 {
		t.Fatalf("a refused send posted: %+v %v", msgs, err)
	}
	if resp := Handle(h.rt, Request{Op: "send", To: pid, From: "ana", Body: "b"}); resp.Error != "" || resp.Message == nil {
		t.Fatalf("a good send: %+v", resp)
	}
	if resp := Handle(h.rt, Request{Op: "signal", PID: pid, Signal: "kill"}); resp.Error != "" {
		t.Fatalf("kill: %+v", resp)
	}
	want := fmt.Sprintf("to: pid %d has ended; its mailbox is closed", pid)
	if resp := Handle(h.rt, Request{Op: "send", To: pid, From: "ana", Body: "b"}); resp.Error != want {
		t.Fatalf("a send to an ended process: %q, want %q", resp.Error, want)
	}
}
