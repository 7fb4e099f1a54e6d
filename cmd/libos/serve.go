package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/server"
)

const serveSynopsis = "libos serve [--dir DIR] [--listen ADDR] [--token-file FILE] [--provider replay|openai] [--script FILE] [--skills DIR]... [provider flags]"

// serveTokenFile is the file in the runtime directory where serve writes the
// token it made up, readable by its owner alone, for as long as it serves.
const serveTokenFile = "serve-token"

// tokenEnv sets the token when no flag does; unlike a flag, it is not
// shown to other users in the process list.
const tokenEnv = "LIBOS_TOKEN"

// listenTCP opens serve's listener (tests replace it to bind what a name
// would resolve to).
var listenTCP = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// serveCommand holds a runtime directory, runs its scheduler and serves the
// HTTP API and the web console until SIGINT or SIGTERM.
func serveCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	listen := fs.String("listen", "127.0.0.1:7070", "`ADDR` to listen on (host:port; a non-loopback address needs a token of --token-file or $LIBOS_TOKEN)")
	tokenFile := fs.String("token-file", "", "read the token every API call and the console need from `FILE` (default: $LIBOS_TOKEN, else a random one written to DIR/"+serveTokenFile+")")
	token := fs.String("token", "", "the token, on the command line: every local user can read it there (ps, /proc); prefer --token-file or $LIBOS_TOKEN")
	quiet := fs.Bool("quiet", false, "do not print one line per event on stderr")
	var pf providerFlags
	pf.register(fs, defaultsServe)
	rf := registerRunFlags(fs, true)
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	tok, err := serveToken(fs, *token, *tokenFile, stderr)
	if err != nil {
		return usageError(stderr, fs.Name(), "%v", err)
	}
	// A name is checked again once bound (below): the resolver decides
	// where foo.localhost is.
	if !server.LoopbackHost(*listen) && tok.made {
		return usageError(stderr, fs.Name(), "--listen %s is not a loopback address: serving it needs a token of your own (--token-file FILE or $%s)", *listen, tokenEnv)
	}
	settings, err := serveSettings(*dir, &pf)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitUsage
	}
	rf.apply(fs, &settings, false)
	ln, err := listenTCP(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	if bound := ln.Addr().String(); !server.LoopbackHost(bound) && tok.made {
		ln.Close()
		return usageError(stderr, fs.Name(), "--listen %s bound %s, which is not a loopback address: serving it needs a token of your own (--token-file FILE or $%s)",
			*listen, bound, tokenEnv)
	}
	ctx, stop := watchSignals(stderr, os.Exit)
	defer stop()
	return serveSession(ctx, *dir, ln, tok, settings, *quiet, stdout, stderr)
}

// serveTokenSource is the token serve requires and where it came from.
type serveTokenSource struct {
	token string
	// made says serve made the token up (none was given): it is written
	// to DIR/serve-token, and the console link carries it.
	made bool
	// file is --token-file's path.
	file string
}

// maxTokenFileBytes bounds what --token-file reads.
const maxTokenFileBytes = 4096

// serveToken is the token of --token-file, else of --token (with a warning:
// every local user can read a command line), else of $LIBOS_TOKEN, else a
// random one: serve never answers whoever can reach its port without one.
func serveToken(fs *flag.FlagSet, token, tokenFile string, stderr io.Writer) (serveTokenSource, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env := os.Getenv(tokenEnv)
	// The token stays in this process: skill runners and their children
	// would otherwise inherit it.
	os.Unsetenv(tokenEnv)
	switch {
	case given["token"] && given["token-file"]:
		return serveTokenSource{}, errors.New("--token and --token-file: give one")
	case given["token-file"]:
		b, err := readTokenFile(tokenFile)
		if err != nil {
			return serveTokenSource{}, err
		}
		return serveTokenSource{token: b, file: tokenFile}, nil
	case given["token"]:
		fmt.Fprintf(stderr, "libos serve: warning: --token shows the token to every local user (ps, /proc/%d/cmdline); use --token-file FILE or $%s\n", os.Getpid(), tokenEnv)
		if err := checkToken(token); err != nil {
			return serveTokenSource{}, fmt.Errorf("--token: %w", err)
		}
		return serveTokenSource{token: token}, nil
	case env != "":
		if err := checkToken(env); err != nil {
			return serveTokenSource{}, fmt.Errorf("$%s: %w", tokenEnv, err)
		}
		return serveTokenSource{token: env}, nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return serveTokenSource{}, fmt.Errorf("make a token: %w", err)
	}
	return serveTokenSource{token: base64.RawURLEncoding.EncodeToString(b), made: true}, nil
}

// readTokenFile reads the token of --token-file: the file's text, without
// the white space around it.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--token-file %s: must be a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if len(b) > maxTokenFileBytes {
		return "", fmt.Errorf("--token-file %s: must hold at most %d bytes", path, maxTokenFileBytes)
	}
	tok := strings.TrimSpace(string(b))
	if err := checkToken(tok); err != nil {
		return "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	return tok, nil
}

// sameFile says paths a and b name one file.
func sameFile(a, b string) bool {
	if a == "" {
		return false
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// checkToken refuses a token an Authorization header cannot carry as it is.
func checkToken(tok string) error {
	if tok == "" {
		return errors.New("the token is empty")
	}
	for _, r := range tok {
		if r <= ' ' || r == 0x7f || r > '~' {
			return errors.New("the token must be printable ASCII without spaces")
		}
	}
	return nil
}

// writeTokenFile writes token to path, readable by its owner alone. It is
// written under another name and renamed, so that the name never shows a
// partial token or a file open to others; and checked after, since some
// file systems do not keep a mode.
func writeTokenFile(path, token string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+serveTokenFile+"-*")
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString(token + "\n")
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = os.Stat(tmp)
	}
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = fmt.Errorf("its file system does not keep it owner-only (mode %04o)", fi.Mode().Perm())
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("token file %s: %w", path, err)
	}
	return nil
}

// serveSettings are the provider settings a served directory runs with: the
// flags' for a directory without recorded settings, else the recorded ones
// corrected by the flags, as resume takes them.
func serveSettings(dir string, pf *providerFlags) (runSettings, error) {
	if requireDir(dir) != nil {
		return pf.settings()
	}
	recorded, err := recordedSettings(dir)
	if errors.Is(err, objects.ErrNotFound) {
		return pf.settings()
	}
	if err != nil {
		return runSettings{}, err
	}
	s, err := pf.resumeSettings(dir)
	if err != nil {
		return runSettings{}, err
	}
	if s == nil {
		return recorded, nil
	}
	return *s, nil
}

// serveInfo is the line serve prints on stdout once it listens.
type serveInfo struct {
	URL string `json:"url"`
	Dir string `json:"dir"`
	// TokenFile holds the token serve made up (none was given).
	TokenFile string `json:"token_file,omitempty"`
}

func serveSession(ctx context.Context, dir string, ln net.Listener, tok serveTokenSource, settings runSettings, quiet bool, stdout, stderr io.Writer) int {
	defer ln.Close()
	catalog, err := loadSkillCatalog(settings.SkillDirs)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitUsage
	}
	defer catalog.Close()
	notifier := server.NewNotifier()
	onEvent := notifier.OnEvent
	if !quiet {
		progress := progressPrinter(stderr)
		onEvent = func(ev kernel.Event) {
			progress(ev)
			notifier.OnEvent(ev)
		}
	}
	rt, err := kernel.Open(dir, kernel.Options{OnEvent: onEvent, Skills: catalog, DisableFullIO: settings.NoFullIO,
		ProviderRetry: settings.Endpoint.retryPolicy()})
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	defer rt.Close()
	if err := rt.PutMeta(metaProvider, settings); err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	provider, err := providerFromSettings(settings, rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: provider (%s): %v\n", settings, err)
		return exitFailed
	}
	credentialsHint(settings, stderr, "libos serve")
	rt.SetProvider(provider)
	stopControl, err := control.Serve(rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	defer stopControl()
	tokenPath := filepath.Join(rt.Dir(), serveTokenFile)
	if tok.made {
		if err := writeTokenFile(tokenPath, tok.token); err != nil {
			fmt.Fprintf(stderr, "libos serve: %v: the token must not be readable by other users\n", err)
			return exitFailed
		}
		// The token dies with this serve: a later one makes its own.
		defer os.Remove(tokenPath)
	} else if !sameFile(tok.file, tokenPath) {
		// A crashed serve's token names nothing; a reader would take it
		// for this one's. (Unless it is the --token-file given.)
		if err := os.Remove(tokenPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "libos serve: %v\n", err)
			return exitFailed
		}
	}
	srv, err := server.New(rt, server.Options{Token: tok.token, Notifier: notifier, Skills: catalog})
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/"
	info := serveInfo{URL: url, Dir: rt.Dir()}
	if tok.made {
		info.TokenFile = tokenPath
	}
	b, _ := json.Marshal(info)
	fmt.Fprintln(stdout, string(b))
	fmt.Fprintf(stderr, "libos serve: %s on %s (API at %s/, provider %s)\n", rt.Dir(), url, server.APIPrefix, settings)
	if tok.made {
		// The fragment never leaves the browser: the console logs in with
		// it and takes it out of the address bar.
		fmt.Fprintf(stderr, "libos serve: console: %s#token=%s (API clients send Authorization: Bearer with the token in %s)\n", url, tok.token, tokenPath)
	} else {
		fmt.Fprintf(stderr, "libos serve: console: %s (it asks for the token)\n", url)
	}

	schedCtx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	scheduled := make(chan error, 1)
	go func() { scheduled <- srv.RunScheduler(schedCtx) }()

	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		code = exitFailed
	case err := <-scheduled:
		if err != nil {
			fmt.Fprintf(stderr, "libos serve: scheduler: %v\n", err)
			code = exitFailed
		}
	}
	// Streams end first: Shutdown waits for every open request.
	srv.Close()
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		hs.Close()
	}
	stopSched()
	<-scheduled
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "libos serve: stopped by %s; %s is idle\n", stopCause(ctx).name(), shellQuote(dir))
	}
	return code
}
