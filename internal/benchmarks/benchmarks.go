// Package benchmarks holds the runtime's benchmark scenarios, shared by `go
// test -bench` and `libos bench`. Each runs the real kernel on a fresh
// directory with the replay provider and a fake clock, and returns figures;
// nothing here asserts a time.
package benchmarks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
)

// Result is one scenario's figures.
type Result struct {
	Name    string             `json:"name"`
	Elapsed time.Duration      `json:"elapsed_ns"`
	Metrics map[string]float64 `json:"metrics"`
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func grant(resource string, right capabilities.Right) capabilities.Grant {
	return capabilities.Grant{Resource: resource, Rights: []capabilities.Right{right}}
}

// open starts a runtime on dir with script and bench:v0, which is base:v0
// without budget limits so long scenarios run out of nothing but turns.
func open(dir, script string) (*kernel.Runtime, error) {
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		return nil, err
	}
	bench, err := images.Builtin("base:v0")
	if err != nil {
		return nil, err
	}
	bench.Name, bench.Budget = "bench", images.Budget{}
	rt, err := kernel.Open(dir, kernel.Options{Clock: clock.NewFake(epoch, true), Workers: 64,
		Images: map[string]*images.Image{"bench:v0": bench}})
	if err != nil {
		return nil, err
	}
	p, err := llm.NewReplay(s, rt)
	if err != nil {
		rt.Close()
		return nil, err
	}
	rt.SetProvider(p)
	return rt, nil
}

func runAll(rt *kernel.Runtime) (time.Duration, error) {
	start := time.Now()
	err := rt.RunUntilIdle(context.Background())
	return time.Since(start), err
}

func checkExited(rt *kernel.Runtime) error {
	ps, err := rt.Processes()
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Status != "exited" && p.Status != "waiting" {
			return fmt.Errorf("pid %d ended %s: %s", p.PID, p.Status, p.Reason)
		}
	}
	return nil
}

// Quanta runs procs processes of quanta quanta each (clock reads, then an
// exit) and reports quanta per second and synced commits per quantum.
func Quanta(dir string, procs, quanta int) (Result, error) {
	var b strings.Builder
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < quanta-1; i++ {
		b.WriteString("      - tool_calls: [{name: get_current_time, arguments: {timezone: UTC}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	rt, err := open(dir, b.String())
	if err != nil {
		return Result{}, err
	}
	defer rt.Close()
	for p := 0; p < procs; p++ {
		if _, err := rt.Spawn(kernel.SpawnSpec{Image: "bench:v0", Goal: fmt.Sprintf("goal %d", p), Grants: []capabilities.Grant{grant("clock:now", capabilities.Read)}}); err != nil {
			return Result{}, err
		}
	}
	before := rt.Store().Stats().SyncedCommits
	elapsed, err := runAll(rt)
	if err != nil {
		return Result{}, err
	}
	if err := checkExited(rt); err != nil {
		return Result{}, err
	}
	total := float64(procs * quanta)
	commits := float64(rt.Store().Stats().SyncedCommits - before)
	return Result{Name: "quanta", Elapsed: elapsed, Metrics: map[string]float64{
		"quanta/s": total / elapsed.Seconds(), "commits/quantum": commits / total, "processes": float64(procs),
	}}, nil
}

// SpawnRoundTrips has one parent spawn a child, wait for it and be woken by
// its exit, rounds times in a row.
func SpawnRoundTrips(dir string, rounds int) (Result, error) {
	var b strings.Builder
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("      - tool_calls: [{name: spawn_child_process, arguments: {image: bench:v0, goal: g}}]\n")
		b.WriteString("      - tool_calls: [{name: wait_child_process, arguments: {child_pid: \"${last.pid}\"}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("  - image: bench:v0\n    turns:\n      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	}
	rt, err := open(dir, b.String())
	if err != nil {
		return Result{}, err
	}
	defer rt.Close()
	if _, err := rt.Spawn(kernel.SpawnSpec{Image: "bench:v0", Goal: "spawn", Grants: []capabilities.Grant{grant("process:spawn", capabilities.Write)}}); err != nil {
		return Result{}, err
	}
	elapsed, err := runAll(rt)
	if err != nil {
		return Result{}, err
	}
	if err := checkExited(rt); err != nil {
		return Result{}, err
	}
	return Result{Name: "spawn_wait", Elapsed: elapsed, Metrics: map[string]float64{"roundtrips/s": float64(rounds) / elapsed.Seconds()}}, nil
}

// MessageRoundTrips has a parent and a child play ping-pong: each round is
// a post and a blocking receive on each side.
func MessageRoundTrips(dir string, rounds int) (Result, error) {
	var b strings.Builder
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	b.WriteString("      - tool_calls: [{name: spawn_child_process, arguments: {image: bench:v0, goal: pong}}]\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: ping}}]\n")
		b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
		b.WriteString("      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 1, body: pong}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	rt, err := open(dir, b.String())
	if err != nil {
		return Result{}, err
	}
	defer rt.Close()
	pid, err := rt.Spawn(kernel.SpawnSpec{Image: "bench:v0", Goal: "ping", Grants: []capabilities.Grant{grant("process:spawn", capabilities.Write)}})
	if err != nil {
		return Result{}, err
	}
	elapsed, err := runAll(rt)
	if err != nil {
		return Result{}, err
	}
	if info, err := rt.Process(pid); err != nil || info.Status != "exited" {
		return Result{}, fmt.Errorf("ping process ended %s: %s (%v)", info.Status, info.Reason, err)
	}
	return Result{Name: "messages", Elapsed: elapsed, Metrics: map[string]float64{"post+receive/s": float64(2*rounds) / elapsed.Seconds()}}, nil
}
