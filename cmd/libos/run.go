package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "embed"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/control"
	"github.com/libos/libos/images"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

//go:embed demo/demo.yaml
var demoScript []byte

// grantFlag collects repeated RESOURCE=RIGHTS flags.
type grantFlag struct {
	name   string
	grants []capabilities.Grant
	effect capabilities.Effect
}

func (g *grantFlag) String() string { return "" }

func (g *grantFlag) Set(v string) error {
	grant, err := capabilities.ParseGrantSpec(fmt.Sprintf("cli-%s-%d", g.name, len(g.grants)+1), v, g.effect, time.Now())
	if err != nil {
		return fmt.Errorf("--%s %q: %w", g.name, v, err)
	}
	g.grants = append(g.grants, grant)
	return nil
}

// providerFlags select and configure the LLM provider.
type providerFlags struct {
	provider, script, model, baseURL string
	endpoint                         endpointFlags
}

func (p *providerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.provider, "provider", "", "LLM provider: replay or openai (default: replay when --script is given, else openai)")
	fs.StringVar(&p.script, "script", "", "replay script (YAML) for --provider replay")
	fs.StringVar(&p.model, "model", "", "model name for --provider openai (default $LIBOS_MODEL)")
	fs.StringVar(&p.baseURL, "base-url", "", "OpenAI-compatible base URL (default $OPENAI_BASE_URL); a user and password in it are sent, never stored")
	p.endpoint.register(fs)
}

// settings validates the flags (loading the script, checking the OpenAI
// configuration) before anything touches the runtime directory.
func (p *providerFlags) settings() (runSettings, error) {
	name := p.provider
	if name == "" {
		name = "openai"
		if p.script != "" {
			name = "replay"
		}
	}
	var s runSettings
	switch name {
	case "replay":
		if p.script == "" {
			return s, errors.New("--script: required with --provider replay")
		}
		if err := p.onlyOpenAI("a replay script answers for the model"); err != nil {
			return s, err
		}
		abs, err := filepath.Abs(p.script)
		if err != nil {
			return s, fmt.Errorf("--script: %w", err)
		}
		s = runSettings{Provider: "replay", Script: abs}
	case "openai":
		if p.script != "" {
			return s, errors.New("--script: only with --provider replay (a model server answers with --provider openai)")
		}
		cfg := llm.OpenAIConfigFromEnv()
		s = runSettings{Provider: "openai", Model: cfg.Model}
		if p.model != "" {
			s.Model = p.model
		}
		var err error
		if p.baseURL != "" {
			err = s.setBaseURL("--base-url", p.baseURL)
		} else {
			err = s.setBaseURL(llm.EnvOpenAIBaseURL, cfg.BaseURL)
		}
		if err != nil {
			return s, err
		}
	default:
		return s, fmt.Errorf("--provider %q: must be replay or openai", name)
	}
	if err := p.endpoint.apply(&s); err != nil {
		return s, err
	}
	if err := checkProviderSettings(s); err != nil {
		if name == "replay" {
			return s, fmt.Errorf("--script: %w", err)
		}
		return s, err
	}
	return s, nil
}

func runCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	goal := fs.String("goal", "", "the root process's goal (required)")
	dir := dirFlag(fs)
	var pf providerFlags
	pf.register(fs)
	grants := &grantFlag{name: "grant", effect: capabilities.Allow}
	denies := &grantFlag{name: "deny", effect: capabilities.Deny}
	fs.Var(grants, "grant", "grant RESOURCE=RIGHTS[@USES] to the root (repeatable; RIGHTS is comma-separated; @N: a one-shot of N uses)")
	fs.Var(denies, "deny", "deny RESOURCE=RIGHTS to the root (repeatable)")
	asks := &grantFlag{name: "ask", effect: capabilities.Ask}
	fs.Var(asks, "ask", "make calls that need RESOURCE=RIGHTS[~DURATION] wait for a Human's approval (repeatable; see libos approvals)")
	skillDirs := registerSkillsFlag(fs)
	retainIO := fs.Bool("retain-io", true, "retain full provider I/O and tool results as durable evidence (context and goal recovery after a reopen need it)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "libos run: exactly one image argument is required (for example base:v0)")
		return exitUsage
	}
	if *goal == "" {
		fmt.Fprintln(stderr, "libos run: --goal: required")
		return exitUsage
	}
	if _, err := images.Builtin(pos[0]); err != nil {
		fmt.Fprintf(stderr, "libos run: %v\n", err)
		return exitUsage
	}
	settings, err := pf.settings()
	if err != nil {
		fmt.Fprintf(stderr, "libos run: %v\n", err)
		return exitUsage
	}
	settings.SkillDirs, settings.NoFullIO, settings.newRoot = skillDirs.dirs, !*retainIO, true
	// Refuse a bad skill package before the directory is touched.
	catalog, err := loadSkillCatalog(settings.SkillDirs)
	if err != nil {
		fmt.Fprintf(stderr, "libos run: %v\n", err)
		return exitUsage
	}
	catalog.Close()
	return session(*dir, stdout, stderr, spawnRoot(pos[0], *goal, rootGrants(append(grants.grants, asks.grants...), denies.grants)), &settings)
}

// rootGrants are what a root started from the command line holds: the clock,
// plus the flags' grants (allow and ask), with denies last (deny beats ask,
// and ask beats allow).
func rootGrants(grants, denies []capabilities.Grant) []capabilities.Grant {
	out := []capabilities.Grant{
		{ID: "cli-clock-now", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
		{ID: "cli-clock-sleep", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
	}
	out = append(out, grants...)
	return append(out, denies...)
}

func demoCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	goal := "Show the runtime: read the clock, have a bad argument refused, keep an Object, delegate to a child that reports by message, sleep once, compact the context, and exit with a structured result."
	grants := []capabilities.Grant{
		{ID: "demo-spawn", Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Allow},
		{ID: "demo-compressor", Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
	}
	code := session(*dir, stdout, stderr, spawnRoot("base:v0", goal, rootGrants(grants, nil)), &runSettings{Provider: "replay", Script: "demo", newRoot: true})
	if code == exitOK {
		d := shellQuote(*dir)
		fmt.Fprintf(stderr, "The run is kept in %s. Look around: libos ps --dir %s; libos inspect 1 --dir %s; libos logs --dir %s;\n"+
			"or open the web console with libos serve --dir %s (it prints the console's link).\n", *dir, d, d, d, d)
	}
	return code
}

// session opens dir with the provider settings (a run's own, or, when nil,
// those the directory recorded), serves the control socket, lets start pick
// the root to report, and runs until that root ends or the runtime is idle,
// printing progress to stderr and the outcome to stdout. SIGINT or SIGTERM
// stops it cleanly (see runSession); a second one exits at once.
func session(dir string, stdout, stderr io.Writer, start func(*kernel.Runtime) (int64, error), settings *runSettings) int {
	ctx, stop := watchSignals(stderr, os.Exit)
	defer stop()
	return runSession(ctx, dir, stdout, stderr, start, settings)
}

// runSession is session under ctx. When ctx is cancelled (by a signal, its
// cause a signalStop) the scheduler stops, the root's current outcome is
// printed all the same, and a root that is not terminal makes the exit code
// the signal's, with a hint on how to continue. A root that already ended
// keeps its own exit code: a signal that comes after the exit changes
// nothing.
func runSession(ctx context.Context, dir string, stdout, stderr io.Writer, start func(*kernel.Runtime) (int64, error), settings *runSettings) int {
	record := settings != nil
	if !record {
		recorded, err := recordedSettings(dir)
		if err != nil {
			fmt.Fprintf(stderr, "libos: %v\n", err)
			return exitFailed
		}
		settings = &recorded
	}
	catalog, err := loadSkillCatalog(settings.SkillDirs)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	defer catalog.Close()
	rt, err := kernel.Open(dir, kernel.Options{OnEvent: progressPrinter(stderr), Skills: catalog, DisableFullIO: settings.NoFullIO,
		ProviderRetry: settings.Endpoint.retryPolicy()})
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	defer rt.Close()
	if settings.newRoot {
		if err := othersLive(rt, *settings, dir); err != nil {
			fmt.Fprintf(stderr, "libos: %v\n", err)
			return exitUsage
		}
	}
	if record {
		if err := rt.PutMeta(metaProvider, settings); err != nil {
			fmt.Fprintf(stderr, "libos: %v\n", err)
			return exitFailed
		}
	}
	provider, err := providerFromSettings(*settings, rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos: provider (%s): %v\n", settings, err)
		return exitFailed
	}
	credentialsHint(*settings, stderr, "libos")
	rt.SetProvider(provider)
	stopControl, err := control.Serve(rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	defer stopControl()
	pid, err := start(rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		if errors.Is(err, kernel.ErrInvalidSpawn) {
			return exitUsage
		}
		return exitFailed
	}
	err = rt.RunUntilIdle(ctx)
	stopped := ctx.Err() != nil
	if err != nil && !(stopped && errors.Is(err, context.Canceled)) {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	code := printOutcome(rt, pid, stdout, stderr)
	if code == exitWaiting {
		approvalHint(rt, dir, stderr)
	}
	if !stopped {
		return code
	}
	sig := stopCause(ctx)
	if code == exitWaiting || unfinished(rt) {
		fmt.Fprintf(stderr, "libos: stopped by %s; continue with: libos resume --dir %s\n", sig.name(), shellQuote(dir))
	}
	if code == exitWaiting {
		return sig.exitCode()
	}
	return code
}

// othersLive refuses a new run in a directory whose live processes an
// earlier run started with another model: a run drives every live process
// of its directory with its own provider, so a root left waiting for its
// server to be fixed would be answered by another model or script (and
// failed for good when a replay script has nothing for it).
func othersLive(rt *kernel.Runtime, settings runSettings, dir string) error {
	var recorded runSettings
	if err := rt.GetMeta(metaProvider, &recorded); err != nil {
		return nil // a new directory, or one no run recorded settings in
	}
	if recorded.Provider == settings.Provider && recorded.Script == settings.Script &&
		recorded.Model == settings.Model && recorded.BaseURL == settings.BaseURL {
		return nil
	}
	ps, err := rt.Processes()
	if err != nil {
		return err
	}
	var live []string
	for _, p := range ps {
		if !p.Status.Terminal() {
			live = append(live, strconv.FormatInt(p.PID, 10))
		}
	}
	if len(live) == 0 {
		return nil
	}
	d := shellQuote(dir)
	return fmt.Errorf("%s holds processes an earlier run started with %s that have not ended (pid %s), and this run would "+
		"drive them with %s: continue them with libos resume --dir %s, end them with libos kill PID --dir %s, or run in another --dir",
		dir, recorded, strings.Join(live, ", "), settings, d, d)
}

// unfinished reports whether any process of rt is not terminal.
func unfinished(rt *kernel.Runtime) bool {
	ps, err := rt.Processes()
	if err != nil {
		return true
	}
	for _, p := range ps {
		if !p.Status.Terminal() {
			return true
		}
	}
	return false
}

// signalStop is the cancellation cause of a session stopped by a signal.
type signalStop struct{ sig os.Signal }

func (s signalStop) Error() string { return "stopped by " + s.name() }

func (s signalStop) name() string {
	switch s.sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.sig.String()
}

// exitCode is 128 plus the signal's number, as a shell reports a process
// the signal ended.
func (s signalStop) exitCode() int {
	if s.sig == os.Interrupt {
		return exitInterrupted
	}
	return exitTerminated
}

// stopCause is the signal that cancelled ctx; any other cancellation counts
// as SIGTERM, a request to stop from outside.
func stopCause(ctx context.Context) signalStop {
	var s signalStop
	if errors.As(context.Cause(ctx), &s) {
		return s
	}
	return signalStop{sig: syscall.SIGTERM}
}

// watchSignals returns a context cancelled, with a signalStop cause, by the
// first SIGINT or SIGTERM; a second one calls exit with its code, so a stop
// that hangs can still be cut short. stop ends the watch.
func watchSignals(stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		stopping := false
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				s := signalStop{sig: sig}
				if !stopping {
					stopping = true
					fmt.Fprintf(stderr, "libos: %s: stopping (send it again to exit at once)\n", s.name())
					cancel(s)
					continue
				}
				fmt.Fprintf(stderr, "libos: second signal (%s): exiting without a clean stop\n", s.name())
				exit(s.exitCode())
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		<-finished
		cancel(nil)
	}
}

// shellQuote quotes dir for the hint when a shell would split or expand it.
func shellQuote(dir string) string {
	if dir != "" && strings.IndexFunc(dir, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@%=", r))
	}) < 0 {
		return dir
	}
	return "'" + strings.ReplaceAll(dir, "'", `'\''`) + "'"
}

// spawnRoot starts the root of a run and records it for resume.
func spawnRoot(image, goal string, grants []capabilities.Grant) func(*kernel.Runtime) (int64, error) {
	return func(rt *kernel.Runtime) (int64, error) {
		return rt.Spawn(kernel.SpawnSpec{Image: image, Goal: goal, Grants: grants, RecordPIDAs: metaRoot})
	}
}

// outcome is the final JSON line of run, demo and resume.
type outcome struct {
	PID       int64           `json:"pid"`
	Image     string          `json:"image"`
	Status    process.State   `json:"status"`
	ResultOID *string         `json:"result_oid"`
	Result    json.RawMessage `json:"result"`
	Reason    string          `json:"reason,omitempty"`
}

func printOutcome(rt *kernel.Runtime, pid int64, stdout, stderr io.Writer) int {
	info, err := rt.Process(pid)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	out := outcome{PID: info.PID, Image: info.Image, Status: info.Status, Result: json.RawMessage("null"), Reason: info.Reason}
	if info.ResultOID != "" {
		oid := info.ResultOID
		out.ResultOID = &oid
		_, payload, err := rt.ReadObject(oid)
		switch {
		case errors.Is(err, objects.ErrCorrupt):
			// A store that cannot be trusted cannot report success.
			fmt.Fprintf(stderr, "libos: result %s: %v\n", oid, err)
			return exitFailed
		case err != nil:
			fmt.Fprintf(stderr, "libos: result %s: %v\n", oid, err)
		case json.Valid(payload):
			out.Result = payload
		}
	}
	b, _ := json.Marshal(out)
	fmt.Fprintln(stdout, string(termJSON(b)))
	switch info.Status {
	case process.Exited:
		return exitOK
	case process.Failed, process.Killed:
		return exitFailed
	}
	return exitWaiting
}

// progressPrinter prints one line per event on w, escaped (termText): tool
// names, arguments, summaries and reasons are the model's.
func progressPrinter(w io.Writer) func(kernel.Event) {
	return func(ev kernel.Event) {
		var line string
		switch ev.Kind {
		case kernel.EventSpawn:
			line = fmt.Sprintf("spawned %s", ev.Image)
			if ev.Parent != 0 {
				line += fmt.Sprintf(" (parent %d)", ev.Parent)
			}
		case kernel.EventState:
			line = fmt.Sprintf("%s -> %s", ev.From, ev.To)
			if ev.Wait != "" {
				line += " (" + ev.Wait + ")"
			}
			if ev.Reason != "" {
				line += ": " + ev.Reason
			}
		case kernel.EventQuantum:
			line = fmt.Sprintf("quantum: provider call, turn %d", ev.Turn)
		case kernel.EventProvider:
			line = providerLine(ev)
		case kernel.EventToolCall:
			line = fmt.Sprintf("call %s %s", ev.Tool, ev.Args)
		case kernel.EventToolDone:
			status := "ok"
			if ev.OK != nil && !*ev.OK {
				status = "error"
				if ev.Code != "" {
					status += " " + ev.Code
				}
			}
			line = fmt.Sprintf("  %s %s: %s", ev.Tool, status, ev.Summary)
		case kernel.EventRecovered:
			line = "recovered: " + ev.Reason
		default:
			line = ev.Kind
		}
		fmt.Fprintf(w, "[pid %d] %s\n", ev.PID, termText(line))
	}
}

// providerLine is one provider call attempt on one line: its attempt,
// outcome, latency and tokens, and the start of the model's text (or the
// error, shortened once by the adapter).
func providerLine(ev kernel.Event) string {
	d, _ := ev.Detail.(map[string]any)
	line := fmt.Sprintf("provider call, turn %d, attempt %v: %v, %v ms", ev.Turn, d["attempt"], d["outcome"], d["latency_ms"])
	if ev.Reason != "" {
		return line + fmt.Sprintf(" (%v): %s", d["disposition"], ev.Reason)
	}
	line += fmt.Sprintf(", %v+%v tokens, %v tool calls", d["prompt_tokens"], d["completion_tokens"], d["tool_calls"])
	if fr, ok := d["finish_reason"]; ok && fr != "stop" && fr != "tool_calls" {
		line += fmt.Sprintf(", finish %v", fr)
	}
	if ev.Summary != "" {
		line += ": " + strconv.Quote(ev.Summary)
	}
	return line
}

// approvalHint tells, when a run stops idle, which calls wait for a Human
// and how to decide them: nothing else can move the tree on.
func approvalHint(rt *kernel.Runtime, dir string, stderr io.Writer) {
	list, err := rt.Approvals()
	if err != nil {
		return
	}
	for _, a := range list {
		// The call id is the model's: quoted for the shell, escaped for the terminal.
		call := termText(a.CallID)
		fmt.Fprintf(stderr, "libos: pid %d waits for approval of call %s (%s, %s on %s): libos approve %d %s --dir %s (or libos deny), then libos resume --dir %s\n",
			a.PID, call, termText(a.Tool), termText(strings.Join(a.Rights, ",")), termText(a.Resource), a.PID, shellQuote(call), shellQuote(dir), shellQuote(dir))
	}
}
