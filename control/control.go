// Package control is a runtime directory's control socket: the requests a
// CLI or an operator sends to the runtime that holds the directory (list,
// send, inspect, signal, approve, checkpoints), the server that answers them
// with a bounded, owner-only unix socket, and the client that dials it. It
// uses only the kernel's exported API.
package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
)

// SocketName is the control socket a running runtime serves inside
// its directory, so that `libos ps` and `libos send` reach a held directory.
const SocketName = "control.sock"

// ErrUnreachable says a held directory's control socket could not be reached.
var ErrUnreachable = errors.New("the runtime holding the directory does not answer on its control socket")

// Request is one request on the control socket.
type Request struct {
	// Op is one of Ops.
	Op         string `json:"op"`
	PID        int64  `json:"pid,omitempty"`
	OID        string `json:"oid,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
	// Since is the event seq logs reads after; All lists every message.
	Since     uint64 `json:"since,omitempty"`
	All       bool   `json:"all,omitempty"`
	Signal    string `json:"signal,omitempty"`
	Goal      string `json:"goal,omitempty"`
	To        int64  `json:"to,omitempty"`
	From      string `json:"from,omitempty"`
	Body      string `json:"body,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Interrupt bool   `json:"interrupt,omitempty"`
	// CallID and Reason name the call an approve or deny decides, and why;
	// ApprovalID, when given, the hold of that call (kernel.ApprovalRef).
	CallID     string `json:"call_id,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Response answers a Request.
type Response struct {
	Error     string               `json:"error,omitempty"`
	Result    json.RawMessage      `json:"result,omitempty"`
	Processes []kernel.ProcessInfo `json:"processes,omitempty"`
	Message   *mailbox.Message     `json:"message,omitempty"`
}

// Ops are the operations of the control socket.
var Ops = []string{
	"ps", "send", "goal_set", "goal_get", "checkpoint_create", "checkpoint_list", "checkpoint_inspect", "checkpoint_restore",
	"checkpoint_fork", "inspect", "logs", "objects", "object", "messages", "context", "signal",
	"approvals", "approve", "deny",
}

// ReadOnlyOps are the operations that only read: a Host may serve them from
// a directory opened with kernel.Options.ReadOnly.
var ReadOnlyOps = map[string]bool{
	"ps": true, "checkpoint_list": true, "checkpoint_inspect": true, "inspect": true, "logs": true,
	"objects": true, "object": true, "messages": true, "context": true, "goal_get": true, "approvals": true,
}

// Handle executes a request against rt.
func Handle(k *kernel.Runtime, req Request) Response {
	switch req.Op {
	case "ps":
		ps, err := k.Processes()
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{Processes: ps}
	case "send":
		return send(k, req)
	}
	var v any
	var err error
	switch req.Op {
	case "goal_set":
		v, err = k.SetGoal(req.PID, req.Goal)
	case "checkpoint_create":
		v, err = k.CreateCheckpoint(req.PID)
	case "checkpoint_list":
		v, err = k.Checkpoints(req.PID)
	case "checkpoint_inspect":
		v, err = k.InspectCheckpoint(req.Checkpoint)
	case "checkpoint_restore":
		v, err = k.RestoreCheckpoint(req.Checkpoint)
	case "checkpoint_fork":
		v, err = k.ForkCheckpoint(req.Checkpoint)
	case "inspect":
		v, err = k.Inspect(req.PID)
	case "logs":
		v, err = k.EventLog(kernel.EventQuery{PID: req.PID, After: req.Since})
	case "objects":
		v, err = k.ObjectsOf(req.PID)
	case "object":
		v, err = k.ObjectByID(req.OID)
	case "messages":
		v, err = k.Messages(req.PID, req.All)
	case "context":
		v, err = k.ContextOf(req.PID)
	case "goal_get":
		v, err = k.GoalOf(req.PID)
	case "signal":
		v, err = k.Signal(req.PID, req.Signal)
	case "approvals":
		v, err = k.Approvals()
	case "approve":
		err = k.Approve(kernel.ApprovalRef{PID: req.PID, CallID: req.CallID, ID: req.ApprovalID})
		v = map[string]any{"pid": req.PID, "call_id": req.CallID, "decision": "approved"}
	case "deny":
		err = k.DenyApproval(kernel.ApprovalRef{PID: req.PID, CallID: req.CallID, ID: req.ApprovalID}, req.Reason)
		v = map[string]any{"pid": req.PID, "call_id": req.CallID, "decision": "denied", "reason": req.Reason}
	default:
		return Response{Error: fmt.Sprintf("op %q: must be one of %s", req.Op, strings.Join(Ops, ", "))}
	}
	if err != nil {
		return Response{Error: err.Error()}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Response{Error: err.Error()}
	}
	return Response{Result: b}
}

// sendFields names, by the mailbox's name of a message field, the field of
// a send request that fills it.
var sendFields = map[string]string{"sender": "from", "recipient": "to"}

// send posts req's Human message. Its errors name the request's fields, not
// the mailbox's or a tool's.
func send(k *kernel.Runtime, req Request) Response {
	m, err := k.PostHumanMessage(kernel.HumanMessage{To: req.To, From: req.From, Body: req.Body, Subject: req.Subject, Interrupt: req.Interrupt})
	var fe *mailbox.FieldError
	// The kernel names the recipient in words of its message tool; every
	// other request says a missing pid as kernel.ErrNoProcess does.
	if errors.Is(err, kernel.ErrNoProcess) {
		return Response{Error: fmt.Sprintf("to: %v: pid %d", kernel.ErrNoProcess, req.To)}
	}
	if errors.Is(err, kernel.ErrEnded) {
		return Response{Error: fmt.Sprintf("to: pid %d has ended; its mailbox is closed", req.To)}
	}
	if errors.As(err, &fe) {
		field := fe.Field
		if f, ok := sendFields[field]; ok {
			field = f
		}
		return Response{Error: field + ": " + fe.Rule}
	}
	if err != nil {
		return Response{Error: err.Error()}
	}
	return Response{Message: &m}
}

// socketAddr returns a path for the socket in dir short enough for
// sun_path (108 bytes): long directories are reached through an open
// descriptor under /proc/self/fd. release closes that descriptor.
func socketAddr(dir string) (addr string, release func(), err error) {
	full := filepath.Join(dir, SocketName)
	if len(full) < 100 {
		return full, func() {}, nil
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("control socket: open %s: %w", dir, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + SocketName, func() { syscall.Close(fd) }, nil
}

// Bounds of the control server. A connection is an outside party's: without
// them one client could make the runtime buffer any amount, hold any number
// of descriptors, or keep a goroutine forever by never speaking.
const (
	// MaxRequest is the largest request accepted, in bytes.
	MaxRequest = 16 << 20
	// MaxConns is how many connections are served at once; more are
	// refused with an error response.
	MaxConns = 64
	// ReadTimeout is how long a connection has to send its request.
	ReadTimeout = 10 * time.Second
	// WriteTimeout is how long a client has to take its response.
	WriteTimeout = 10 * time.Second
)

// config is how a control server is bounded and whom it admits;
// tests shorten the bounds and change the uid.
type config struct {
	maxRequest   int64
	maxConns     int
	readTimeout  time.Duration
	writeTimeout time.Duration
	uid          int // the only uid whose processes may connect
	// handle answers a request (Handle; tests slow it down).
	handle func(*kernel.Runtime, Request) Response
}

func defaultConfig() config {
	return config{
		maxRequest:   MaxRequest,
		maxConns:     MaxConns,
		readTimeout:  ReadTimeout,
		writeTimeout: WriteTimeout,
		uid:          os.Getuid(),
		handle:       Handle,
	}
}

// peerCred is what the operating system reports about the process at the
// other end of a unix socket.
type peerCred struct {
	pid      int32
	uid, gid uint32
}

// errPeerCredUnsupported says this platform cannot report a peer's
// credentials; the socket's owner-only permissions are then the only check.
var errPeerCredUnsupported = errors.New("peer credentials are not available on this platform")

// peerAllowed is the rule for who may use the control socket: a process of
// the user the runtime runs as, and no one else.
func peerAllowed(cred peerCred, uid int) bool {
	return uid >= 0 && int64(cred.uid) == int64(uid)
}

// Serve serves control requests on the directory's socket until
// stop is called. A socket file left by a crashed runtime is replaced: this
// runtime holds the directory lock, so no other runtime can be serving it.
// Only processes of the runtime's own uid are served, a request is at most
// MaxRequest bytes and must arrive within ReadTimeout, and at most MaxConns
// connections are served at once.
func Serve(k *kernel.Runtime) (stop func(), err error) {
	return serve(k, defaultConfig())
}

func serve(k *kernel.Runtime, cfg config) (stop func(), err error) {
	addr, release, err := socketAddr(k.Dir())
	if err != nil {
		return nil, err
	}
	defer release()
	path := filepath.Join(k.Dir(), SocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket: remove stale %s: %w", path, err)
	}
	// The directory is 0700 and the socket is made 0600 at once: only the
	// owner can connect. The peer's uid is checked as well, since a socket
	// file's permissions are not honoured everywhere.
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	s := &server{
		k:     k,
		ln:    ln,
		cfg:   cfg,
		slots: make(chan struct{}, cfg.maxConns),
		conns: map[net.Conn]bool{},
	}
	s.wg.Add(1)
	go s.accept()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.close()
			os.Remove(path)
		})
	}, nil
}

// server serves one runtime's control socket.
type server struct {
	k     *kernel.Runtime
	ln    net.Listener
	cfg   config
	slots chan struct{} // one token per connection being served
	wg    sync.WaitGroup

	mu sync.Mutex
	// conns are the open connections; true once its request is read and
	// being handled, which stop lets finish (see close).
	conns  map[net.Conn]bool
	closed bool
}

func (s *server) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// A transient failure (out of descriptors) must not end the
			// server for the rest of the run.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.refuse(conn, fmt.Sprintf("control socket busy: %d connections are already being served; try again", s.cfg.maxConns))
			continue
		}
		if !s.track(conn) {
			conn.Close()
			<-s.slots
			return
		}
		s.wg.Add(1)
		go s.serve(conn)
	}
}

// refuse answers conn with msg and closes it without holding a slot.
func (s *server) refuse(conn net.Conn, msg string) {
	// A fresh connection's send buffer is empty, so the short answer does
	// not block; the deadline only guards the accept loop.
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	json.NewEncoder(conn).Encode(Response{Error: msg})
	conn.Close()
}

func (s *server) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = false
	return true
}

// begin marks conn's request as being handled, unless the server is
// stopping: then the request is not served.
func (s *server) begin(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = true
	return true
}

func (s *server) serve(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
		<-s.slots
	}()
	if err := s.checkPeer(conn); err != nil {
		s.reply(conn, Response{Error: err.Error()})
		return
	}
	conn.SetReadDeadline(time.Now().Add(s.cfg.readTimeout))
	req, err := readRequest(conn, s.cfg.maxRequest)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("no request within %s: connection closed", s.cfg.readTimeout)
		}
		s.reply(conn, Response{Error: err.Error()})
		return
	}
	conn.SetReadDeadline(time.Time{})
	if !s.begin(conn) {
		s.reply(conn, Response{Error: "the runtime holding the directory is stopping: the request was not served"})
		return
	}
	s.reply(conn, s.cfg.handle(s.k, req))
}

func (s *server) reply(conn net.Conn, resp Response) {
	conn.SetWriteDeadline(time.Now().Add(s.cfg.writeTimeout))
	json.NewEncoder(conn).Encode(resp)
}

func (s *server) checkPeer(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("control socket: a %T is not a unix connection", conn)
	}
	cred, err := unixPeerCred(uc)
	if errors.Is(err, errPeerCredUnsupported) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket: peer credentials: %w", err)
	}
	if !peerAllowed(cred, s.cfg.uid) {
		return fmt.Errorf("control socket: peer uid %d is not the runtime's uid %d: refused", cred.uid, s.cfg.uid)
	}
	return nil
}

// close stops accepting, ends every connection still waiting for its
// request (an idle client must not hold up a shutdown for its read timeout)
// and waits for the handlers. A request being handled is answered: what it
// asked may be done already, such as a kill of the root that ends the run
// and so stops this server, and a cut connection would report it failed.
func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c, handling := range s.conns {
		if !handling {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// readRequest decodes one request: a JSON object of at most limit bytes
// holding only Request's fields, then its newline and nothing more. It never
// reads more than limit+1 bytes from r (the request and its newline), so a
// larger request costs the server no more than the bound.
func readRequest(r io.Reader, limit int64) (Request, error) {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	dec := json.NewDecoder(lr)
	// A misspelt field would otherwise be dropped and the request served
	// without it: a send meant as an interrupt would go out as a normal one.
	dec.DisallowUnknownFields()
	var req Request
	err := dec.Decode(&req)
	if dec.InputOffset() > limit || (lr.N <= 0 && errors.Is(err, io.ErrUnexpectedEOF)) {
		return Request{}, fmt.Errorf("control request larger than %d bytes (%d MiB): refused", limit, limit>>20)
	}
	if err != nil {
		return Request{}, fmt.Errorf("decode request: %w", err)
	}
	// A second request on the connection would never be answered: refuse
	// the first as well rather than serve one and drop the other. Only what
	// arrived with the request is seen; the server reads nothing more.
	rest, _ := io.ReadAll(dec.Buffered())
	if rest = bytes.TrimSpace(rest); len(rest) > 0 {
		const shown = 64
		if len(rest) > shown {
			rest = append(rest[:shown:shown], "..."...)
		}
		return Request{}, fmt.Errorf("decode request: trailing data after the request (%q): send one request per connection", rest)
	}
	return req, nil
}

// Dial sends req to the runtime serving dir's control socket,
// waiting up to wait for the socket to come up (a runtime that just took the
// directory may not serve it yet).
func Dial(ctx context.Context, dir string, req Request, wait time.Duration) (Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("control request: %w", err)
	}
	if int64(len(body)) > MaxRequest {
		return Response{}, fmt.Errorf("control request of %d bytes is larger than the control socket accepts (%d MiB)", len(body), MaxRequest>>20)
	}
	body = append(body, '\n')
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Response{}, fmt.Errorf("control socket: %w", err)
	}
	addr, release, err := socketAddr(abs)
	if err != nil {
		return Response{}, err
	}
	defer release()
	deadline := time.Now().Add(wait)
	var conn net.Conn
	for {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", addr)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("control socket %s: %w", filepath.Join(abs, SocketName), ctx.Err())
		}
		if time.Now().After(deadline) {
			return Response{}, fmt.Errorf("%w (%s): %v", ErrUnreachable, filepath.Join(abs, SocketName), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	// The context's end cuts the exchange short: a past deadline wakes the
	// blocked write or read at once.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	resp, err := exchange(conn, body)
	if err != nil && ctx.Err() != nil {
		return Response{}, fmt.Errorf("control request: %w", ctx.Err())
	}
	return resp, err
}

// exchange writes a request's body on conn and reads the answer.
func exchange(conn net.Conn, body []byte) (Response, error) {
	if _, err := conn.Write(body); err != nil {
		// A server that refused the request (busy, wrong peer) may have
		// answered why before closing; that says more than a broken pipe.
		var resp Response
		if derr := json.NewDecoder(conn).Decode(&resp); derr == nil && resp.Error != "" {
			return resp, nil
		}
		return Response{}, fmt.Errorf("control request: %w", err)
	}
	var resp Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("control response: %w", err)
	}
	return resp, nil
}
