// Command libos-probe is the subprocess of the cli-tool conformance suite. It
// reports what it received (argv, cwd, environment, stdin, input files) and
// can misbehave on request: emit large output, fail, hang, or leave a
// descendant behind that writes a file later.
//
// Usage:
//
//	libos-probe report [args...]           print a JSON report of what it received
//	libos-probe emit stdout|stderr N TEXT  write N bytes of TEXT repeated, then exit 0
//	libos-probe fail CODE MESSAGE          write "partial" to stdout, MESSAGE to stderr, exit CODE
//	libos-probe mark FILE                  create FILE, print {"marked":true}
//	libos-probe hang FILE DELAY            start a descendant that creates FILE after DELAY, then hang
//	libos-probe orphan FILE DELAY          start that descendant, wait until it runs, exit 0
//	libos-probe escape FILE DELAY          like orphan, but the descendant leaves the process group
//	libos-probe stubborn                   ignore SIGTERM and hang
//	libos-probe late-write FILE DELAY      write FILE.pid, sleep DELAY, create FILE
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fatal("usage: libos-probe MODE [args...]")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "report":
		report()
	case "emit":
		need(args, 3)
		emit(args[0], atoi(args[1]), args[2])
	case "fail":
		need(args, 2)
		fmt.Print("partial")
		fmt.Fprint(os.Stderr, args[1])
		os.Exit(atoi(args[0]))
	case "mark":
		need(args, 1)
		if err := os.WriteFile(args[0], []byte("ran\n"), 0o644); err != nil {
			fatal(err.Error())
		}
		fmt.Println(`{"marked":true}`)
	case "hang":
		need(args, 2)
		spawnLateWriter(args[0], args[1], nil)
		time.Sleep(time.Hour)
	case "orphan":
		need(args, 2)
		spawnLateWriter(args[0], args[1], nil)
		fmt.Println(`{"orphaned":true}`)
	case "escape":
		need(args, 2)
		spawnLateWriter(args[0], args[1], &syscall.SysProcAttr{Setsid: true})
		fmt.Println(`{"escaped":true}`)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring SIGTERM")
		time.Sleep(time.Hour)
	case "late-write":
		need(args, 2)
		// Written then renamed, so a reader never sees an empty pid file.
		if err := os.WriteFile(args[0]+".pid.tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fatal(err.Error())
		}
		if err := os.Rename(args[0]+".pid.tmp", args[0]+".pid"); err != nil {
			fatal(err.Error())
		}
		delay, err := time.ParseDuration(args[1])
		if err != nil {
			fatal(err.Error())
		}
		time.Sleep(delay)
		if err := os.WriteFile(args[0], []byte("written late\n"), 0o644); err != nil {
			fatal(err.Error())
		}
	default:
		fatal("unknown mode " + os.Args[1])
	}
}

// Report is what "report" prints.
type Report struct {
	Argv  []string          `json:"argv"`
	Cwd   string            `json:"cwd"`
	Env   map[string]string `json:"env"`
	Stdin string            `json:"stdin"`
	// Files maps each RUNX_*_PATH variable to the content of its file.
	Files map[string]string `json:"files"`
	// InputDirMode is the permission of the folder holding RUNX_INPUTS_PATH.
	InputDirMode string `json:"input_dir_mode"`
	// FileModes maps each RUNX_*_PATH variable to its file's permission.
	FileModes map[string]string `json:"file_modes"`
}

func report() {
	r := Report{Argv: os.Args, Env: map[string]string{}, Files: map[string]string{}, FileModes: map[string]string{}}
	var err error
	if r.Cwd, err = os.Getwd(); err != nil {
		fatal(err.Error())
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		r.Env[k] = v
	}
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		fatal(err.Error())
	}
	r.Stdin = string(stdin)
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !strings.HasPrefix(k, "RUNX_") || !strings.HasSuffix(k, "_PATH") {
			continue
		}
		data, err := os.ReadFile(r.Env[k])
		if err != nil {
			fatal(err.Error())
		}
		r.Files[k] = string(data)
		info, err := os.Stat(r.Env[k])
		if err != nil {
			fatal(err.Error())
		}
		r.FileModes[k] = fmt.Sprintf("%04o", info.Mode().Perm())
	}
	if p := r.Env["RUNX_INPUTS_PATH"]; p != "" {
		info, err := os.Stat(filepath.Dir(p))
		if err != nil {
			fatal(err.Error())
		}
		r.InputDirMode = fmt.Sprintf("%04o", info.Mode().Perm())
	}
	out, err := json.Marshal(r)
	if err != nil {
		fatal(err.Error())
	}
	os.Stdout.Write(append(out, '\n'))
}

func emit(stream string, n int, text string) {
	w := os.Stdout
	if stream == "stderr" {
		w = os.Stderr
	}
	if text == "" {
		fatal("emit needs non-empty TEXT")
	}
	chunk := []byte(strings.Repeat(text, 64<<10/len(text)+1))
	for n > 0 {
		c := chunk[:min(n, len(chunk))]
		if _, err := w.Write(c); err != nil {
			fatal(err.Error())
		}
		n -= len(c)
	}
}

// spawnLateWriter starts a descendant in this process's group and returns
// once it has written its pid file, so the descendant is known to be running.
func spawnLateWriter(file, delay string, attr *syscall.SysProcAttr) {
	self, err := os.Executable()
	if err != nil {
		fatal(err.Error())
	}
	cmd := exec.Command(self, "late-write", file, delay)
	// The descendant shares stdout, so the runtime's drain only ends when the
	// descendant is gone too.
	cmd.Stdout = os.Stdout
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		fatal(err.Error())
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(file + ".pid"); err == nil {
			return
		}
	}
	fatal("descendant did not start")
}

func need(args []string, n int) {
	if len(args) < n {
		fatal(fmt.Sprintf("mode %s needs %d arguments", os.Args[1], n))
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fatal(err.Error())
	}
	return n
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "libos-probe:", msg)
	os.Exit(99)
}
