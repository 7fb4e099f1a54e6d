package kernel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/libos/libos/mailbox"
)

// ControlSocketName is the control socket a running runtime serves inside
// its directory, so that `libos ps` and `libos send` reach a held directory.
const ControlSocketName = "control.sock"

// ErrNoControl says a held directory's control socket could not be reached.
var ErrNoControl = errors.New("the runtime holding the directory does not answer on its control socket")

// ControlRequest is one request on the control socket.
type ControlRequest struct {
	// Op is ps, send, goal_set, checkpoint_create, checkpoint_list,
	// checkpoint_inspect, checkpoint_restore or checkpoint_fork.
	Op         string `json:"op"`
	PID        int64  `json:"pid,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Goal       string `json:"goal,omitempty"`
	To         int64  `json:"to,omitempty"`
	From       string `json:"from,omitempty"`
	Body       string `json:"body,omitempty"`
	Subject    string `json:"subject,omitempty"`
	Interrupt  bool   `json:"interrupt,omitempty"`
}

// ControlResponse answers a ControlRequest.
type ControlResponse struct {
	Error     string           `json:"error,omitempty"`
	Result    json.RawMessage  `json:"result,omitempty"`
	Processes []ProcessInfo    `json:"processes,omitempty"`
	Message   *mailbox.Message `json:"message,omitempty"`
}

// Control executes a control request against this runtime.
func (k *Runtime) Control(req ControlRequest) ControlResponse {
	switch req.Op {
	case "ps":
		ps, err := k.Processes()
		if err != nil {
			return ControlResponse{Error: err.Error()}
		}
		return ControlResponse{Processes: ps}
	case "send":
		m, err := k.PostHumanMessage(HumanMessage{To: req.To, From: req.From, Body: req.Body, Subject: req.Subject, Interrupt: req.Interrupt})
		if err != nil {
			return ControlResponse{Error: err.Error()}
		}
		return ControlResponse{Message: &m}
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
	default:
		return ControlResponse{Error: fmt.Sprintf("op %q: must be ps, send, goal_set or checkpoint_create|list|inspect|restore|fork", req.Op)}
	}
	if err != nil {
		return ControlResponse{Error: err.Error()}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ControlResponse{Error: err.Error()}
	}
	return ControlResponse{Result: b}
}

// socketAddr returns a path for the socket in dir short enough for
// sun_path (108 bytes): long directories are reached through an open
// descriptor under /proc/self/fd. release closes that descriptor.
func socketAddr(dir string) (addr string, release func(), err error) {
	full := filepath.Join(dir, ControlSocketName)
	if len(full) < 100 {
		return full, func() {}, nil
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("control socket: open %s: %w", dir, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + ControlSocketName, func() { syscall.Close(fd) }, nil
}

// ServeControl serves control requests on the directory's socket until
// stop is called. A socket file left by a crashed runtime is replaced: this
// runtime holds the directory lock, so no other runtime can be serving it.
func (k *Runtime) ServeControl() (stop func(), err error) {
	addr, release, err := socketAddr(k.dir)
	if err != nil {
		return nil, err
	}
	defer release()
	path := filepath.Join(k.dir, ControlSocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket: remove stale %s: %w", path, err)
	}
	// The directory is 0700 and the socket is made 0600 at once: only the
	// owner can connect.
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(30 * time.Second))
				var req ControlRequest
				if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
					json.NewEncoder(conn).Encode(ControlResponse{Error: "decode request: " + err.Error()})
					return
				}
				json.NewEncoder(conn).Encode(k.Control(req))
			}()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ln.Close()
			wg.Wait()
			os.Remove(path)
		})
	}, nil
}

// DialControl sends req to the runtime serving dir's control socket,
// waiting up to wait for the socket to come up (a runtime that just took the
// directory may not serve it yet).
func DialControl(ctx context.Context, dir string, req ControlRequest, wait time.Duration) (ControlResponse, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ControlResponse{}, err
	}
	addr, release, err := socketAddr(abs)
	if err != nil {
		return ControlResponse{}, err
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
		if time.Now().After(deadline) || ctx.Err() != nil {
			return ControlResponse{}, fmt.Errorf("%w (%s): %v", ErrNoControl, filepath.Join(abs, ControlSocketName), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return ControlResponse{}, fmt.Errorf("control request: %w", err)
	}
	var resp ControlResponse
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return ControlResponse{}, fmt.Errorf("control response: %w", err)
	}
	return resp, nil
}
