package crashtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fixedEntries maps known pids to script entries.
func fixedEntries(byPID map[int64]int) entryFunc {
	return func(pid int64, _ string) (int, bool) {
		i, ok := byPID[pid]
		return i, ok
	}
}

// TestNoticeDoesNotSplitABlockedCall: a message that arrives while a turn
// ending in a blocking call (here wait_child_process) is being answered
// must not be announced between that call and its result. The model server
// orders the two processes: the child's first answer waits for the
// parent's turn-1 request (so the parent has been told of every earlier
// message), and the parent's turn-1 answer waits for the child's turn-1
// request (so the child's message is durable). The parent then blocks on
// the child, which waits for a Human message; after it, the parent must be
// able to continue: its next request has to pair the wait call with its
// result, as chat-completions servers require.
func TestNoticeDoesNotSplitABlockedCall(t *testing.T) {
	sc := scenario{
		script:    filepath.Join("..", "..", "testdata", "crash", "notice.yaml"),
		image:     "base:v0",
		goal:      "crash notice parent",
		grants:    []string{"process:spawn=write"},
		entry:     fixedEntries(map[int64]int{1: 0, 2: 1}),
		humanTo:   2,
		humanFrom: "bob",
		humanBody: "bye",
	}
	r := newRunner(t, sc)
	r.model.gate(turnKey{2, 0}, turnKey{1, 1})
	r.model.gate(turnKey{1, 1}, turnKey{2, 1})
	out, err := r.drive(never, 4)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.transcript())
	}
	_, _, problems := r.model.stats()
	if out.Status != "exited" || string(out.Result) != `{"message":"bye"}` {
		t.Fatalf("the parent ended %s (%s) with result %s, want exited with the child's result {\"message\":\"bye\"}\nmodel: %v\n%s",
			out.Status, out.Reason, out.Result, problems, r.transcript())
	}
}

// TestResumeAfterRunKilledBeforeRootRecorded: `libos run` spawns the root
// and then records it for `libos resume` in a second commit. A run killed
// between the two leaves a runnable root; `libos resume` must still
// continue the directory. The test kills the run as soon as it reports the
// spawn on stderr, which lands between the two commits nearly always, and
// checks that resume finishes the run; it tries up to 20 times, stopping
// after three kills that landed in the gap, since a kill may land late. (The model server, not the built-in replay, answers, so a
// kill that lands later, mid-quantum, is recovered like any other.)
func TestResumeAfterRunKilledBeforeRootRecorded(t *testing.T) {
	sc := scenario{
		script: filepath.Join("..", "..", "testdata", "replay", "clock.yaml"),
		image:  "base:v0",
		goal:   "read the clock",
		entry:  fixedEntries(map[int64]int{1: 0}),
	}
	const attempts = 20
	unrecorded := 0
	for attempt := 0; attempt < attempts && unrecorded < 3; attempt++ {
		r := newRunner(t, sc)
		dir := r.dir
		cmd := exec.Command(libosBin, r.runArgs()...)
		cmd.Env = cleanEnv()
		errPipe, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(errPipe)
		killed := false
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if !killed && strings.Contains(sc.Text(), "] spawned ") {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		cmd.Wait()
		if !killed {
			t.Fatalf("the run never reported the spawn:\n%s", strings.Join(lines, "\n"))
		}
		snap, err := readSnapshot(dir)
		if err != nil {
			t.Fatal(err)
		}
		if snap == nil || len(snap.procs) == 0 {
			t.Fatalf("attempt %d: no process after the spawn was reported", attempt)
		}
		if !snap.rootRecorded {
			unrecorded++
		}
		res := exec.Command(libosBin, "resume", "--dir", dir)
		res.Env = cleanEnv()
		var stdout, errOut bytes.Buffer
		res.Stdout, res.Stderr = &stdout, &errOut
		err = res.Run()
		var out outcome
		_ = json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out)
		if err != nil || out.Status != "exited" {
			t.Fatalf("attempt %d: the run was killed after spawning pid(s) %v (root recorded: %v); libos resume then failed (%v):\n%s%s",
				attempt, snap.pids(), snap.rootRecorded, err, stdout.String(), errOut.String())
		}
	}
	t.Logf("%d kills landed before the root was recorded", unrecorded)
}
