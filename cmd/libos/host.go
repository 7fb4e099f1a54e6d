package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/server"
)

// Host metadata keys a run records for resume.
const (
	metaProvider = "cli.provider"
	metaRoot     = "cli.root"
)

// runSettings are what resume needs to continue a run: the provider and
// the skill folders. The API key is never stored: it comes from the
// environment again.
type runSettings struct {
	Provider  string   `json:"provider"`
	Script    string   `json:"script,omitempty"` // absolute path, or "demo" for the embedded script
	Model     string   `json:"model,omitempty"`
	BaseURL   string   `json:"base_url,omitempty"`
	SkillDirs []string `json:"skill_dirs,omitempty"`
	// NoFullIO turns off retention of full provider I/O as evidence.
	NoFullIO bool `json:"no_full_io,omitempty"`
	// Endpoint holds the retry and request settings of a real endpoint.
	Endpoint endpointSettings `json:"endpoint,omitzero"`
}

// requireDir refuses a missing runtime directory: ps, send and resume never create one.
func requireDir(dir string) error {
	if _, err := os.Stat(kernel.StorePath(dir)); err != nil {
		return fmt.Errorf("no runtime directory at %s (start one with libos run)", dir)
	}
	return nil
}

// withRuntime runs req against dir: opened directly when it is idle, through
// the control socket of the runtime that holds it otherwise. A request that
// only reads (control.ReadOnlyOps) opens an idle directory read-only, so it
// never writes to it (no recovery, nothing flushed) and works on a full disk.
func withRuntime(dir string, req control.Request) (control.Response, error) {
	if err := requireDir(dir); err != nil {
		return control.Response{}, err
	}
	rt, err := kernel.Open(dir, kernel.Options{ReadOnly: control.ReadOnlyOps[req.Op]})
	if errors.Is(err, objects.ErrInUse) {
		return control.Dial(context.Background(), dir, req, 5*time.Second)
	}
	if err != nil {
		return control.Response{}, err
	}
	defer rt.Close()
	return control.Handle(rt, req), nil
}

func psCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos ps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON array")
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	resp, err := withRuntime(*dir, control.Request{Op: "ps"})
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		fmt.Fprintf(stderr, "libos ps: %v\n", err)
		return exitFailed
	}
	now := time.Now()
	if *asJSON {
		// The same rows as the HTTP API's GET /processes.
		rows := make([]server.ProcessRow, 0, len(resp.Processes))
		for _, p := range resp.Processes {
			rows = append(rows, server.Row(p, now))
		}
		b, _ := json.Marshal(rows)
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tPARENT\tIMAGE\tSTATUS\tWAITING ON\tTURN\tAGE\tREASON")
	for _, p := range resp.Processes {
		parent := "-"
		if p.ParentPID != 0 {
			parent = strconv.FormatInt(p.ParentPID, 10)
		}
		w := server.WaitingOn(p)
		switch {
		case w == "":
			w = "-"
		case p.Wait.Kind == process.WaitProvider && !p.Wait.Until.IsZero():
			w += ", next attempt " + p.Wait.Until.UTC().Format(time.RFC3339)
		}
		reason := "-"
		if p.Reason != "" {
			reason = shorten(oneLine(p.Reason), 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.PID, parent, p.Image, p.Status, w, p.Turn, age(now.Sub(p.CreatedAt)), reason)
	}
	tw.Flush()
	return exitOK
}

func sendCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	interrupt := fs.Bool("interrupt", false, "deliver before the process's next tool call")
	from := fs.String("from", "", "sender name (default $USER)")
	subject := fs.String("subject", "", "message subject")
	asJSON := fs.Bool("json", false, "print the message as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 {
		return usageError(stderr, fs.Name(), "want <pid> TEXT, got %s", countArgs(len(pos)))
	}
	pid, err := parsePID(pos[0])
	if err != nil {
		return usageError(stderr, fs.Name(), "%v", err)
	}
	name := *from
	if name == "" {
		name = os.Getenv("USER")
	}
	resp, err := withRuntime(*dir, control.Request{Op: "send", To: pid, From: name, Body: pos[1], Subject: *subject, Interrupt: *interrupt})
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		fmt.Fprintf(stderr, "libos send: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		b, _ := json.Marshal(resp.Message)
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	m := resp.Message
	fmt.Fprintf(stdout, "pid %d: %s message %s from %s posted\n", pid, m.Kind, m.ID, m.Sender)
	return exitOK
}

func resumeCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	var pf providerFlags
	pf.register(fs)
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	if err := requireDir(*dir); err != nil {
		fmt.Fprintf(stderr, "libos resume: %v\n", err)
		return exitFailed
	}
	settings, err := pf.resumeSettings(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "libos resume: %v\n", err)
		return exitUsage
	}
	return session(*dir, stdout, stderr, func(rt *kernel.Runtime) (int64, error) {
		var root int64
		if err := rt.GetMeta(metaRoot, &root); err != nil {
			return 0, fmt.Errorf("this directory records no root process started by libos run: %w", err)
		}
		return root, nil
	}, settings)
}

// providerFromSettings rebuilds the provider a run started with; a replay
// provider asks spawns which script entry each process follows.
func providerFromSettings(s runSettings, spawns llm.SpawnIndexer) (llm.Provider, error) {
	switch s.Provider {
	case "replay":
		if s.Script == "demo" {
			script, err := llm.ParseScript(demoScript)
			if err != nil {
				return nil, err
			}
			return llm.NewReplay(script, spawns)
		}
		script, err := llm.LoadScript(s.Script)
		if err != nil {
			return nil, err
		}
		return llm.NewReplay(script, spawns)
	case "openai":
		cfg := llm.OpenAIConfigFromEnv()
		cfg.Model, cfg.BaseURL = s.Model, s.BaseURL
		s.Endpoint.configure(&cfg)
		return llm.NewOpenAI(cfg)
	}
	return nil, fmt.Errorf("recorded provider %q: must be replay or openai", s.Provider)
}

// checkProviderSettings reports why s names no provider that can be built,
// before any runtime exists to answer a replay provider's spawn indexes.
func checkProviderSettings(s runSettings) error {
	_, err := providerFromSettings(s, llm.SpawnIndexFunc(func(int64) (int, error) {
		return 0, errors.New("no runtime is open")
	}))
	return err
}

func (s runSettings) String() string {
	parts := []string{s.Provider}
	if s.Script != "" {
		parts = append(parts, "script "+s.Script)
	}
	if s.Model != "" {
		parts = append(parts, "model "+s.Model)
	}
	return strings.Join(parts, ", ")
}

// recordedSettings reads the settings a run recorded in dir.
func recordedSettings(dir string) (runSettings, error) {
	var s runSettings
	rt, err := kernel.Open(dir, kernel.Options{ReadOnly: true})
	if err != nil {
		return s, err
	}
	defer rt.Close()
	if err := rt.GetMeta(metaProvider, &s); err != nil {
		return s, fmt.Errorf("this directory records no provider settings: %w", err)
	}
	return s, nil
}
