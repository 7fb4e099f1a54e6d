//go:build linux

package clitool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canSupervise is true where a supervisor can track every descendant: Linux
// child subreapers receive the orphans of their tree instead of init.
const canSupervise = true

// becomeSubreaper makes the calling process a child subreaper. The attribute
// belongs to the whole process, which is why only a process whose only
// children are one tool's tree takes it: a dedicated supervisor process, or
// a program that runs one call (InProcess).
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	return nil
}

// toolProcAttr starts the tool in its own process group; under a supervisor
// (subreaper) the tool also dies with it, so a supervisor that is killed
// does not leave its tool running.
func toolProcAttr(subreaper bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if subreaper {
		attr.Pdeathsig = syscall.SIGKILL
	}
	return attr
}

// awaitTool blocks until the tool pid has exited and leaves it unreaped, so
// that its pid, which is also its process group id, cannot be reused while
// the group is signalled. Without chld it waits for pid alone. With chld (a
// subreaper) it also reaps every other child as it exits: orphans of the
// tree are reparented here and would otherwise stay zombies until the end.
func awaitTool(pid int, chld <-chan os.Signal) toolExit {
	var info unix.Siginfo
	if chld == nil {
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return toolExit{err: err}
			}
		}
	}
	for {
		info = unix.Siginfo{}
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		switch zombie := siginfoPID(&info); {
		case err == unix.EINTR:
		case err != nil:
			return toolExit{err: err}
		case zombie == pid:
			return toolExit{}
		case zombie > 0:
			var ws syscall.WaitStatus
			_ = wait4(zombie, &ws)
		default:
			<-chld
		}
	}
}

// siginfoPID reads si_pid from a siginfo_t filled by waitid: it follows
// si_signo, si_errno and si_code, aligned like the union of pointers that
// holds it. unix.Siginfo does not export it.
func siginfoPID(info *unix.Siginfo) int {
	const ptr = unsafe.Sizeof(uintptr(0))
	const offset = (3*4 + ptr - 1) &^ (ptr - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), offset)))
}

// sweep kills and reaps every remaining descendant of the calling subreaper
// and returns once it has no child left, or with an error naming the
// descendants still alive at deadline. Descendants are found by walking
// /proc from the caller down, so processes that left the process group or
// the session are found as well; a process whose parent died along the way
// has been reparented to the caller and is found as its child.
//
// The whole tree is halted before any of it is killed (stopThenKill): a
// process that saw another end (a parent waiting for its child, the reader
// of a pipe) could otherwise act on it, a shell running its next command
// once its sleep was killed.
func sweep(chld <-chan os.Signal, deadline time.Time) error {
	self := os.Getpid()
	for {
		if !reapChildren() {
			return nil
		}
		tree, err := descendants(self)
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			pids := make([]int, len(tree))
			for i, d := range tree {
				pids[i] = d.pid
			}
			sort.Ints(pids)
			return fmt.Errorf("descendants %v of the tool could not be ended within %s", pids, sweepLimit)
		}
		stopThenKill(self, tree)
		select {
		case <-chld:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// reapChildren reaps every child that has exited and reports whether any
// child, running or not, remains.
func reapChildren() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil: // ECHILD: no child at all
			return false
		case pid == 0:
			return true
		}
	}
}

// descendant is a process found below the caller, with the parent it had.
type descendant struct{ pid, ppid int }

// descendants lists every process below root from /proc, each after its
// parent.
func descendants(root int) ([]descendant, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes to find the tool's descendants: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("listing processes to find the tool's descendants: %w", err)
	}
	children := make(map[int][]int)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == root {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var tree []descendant
	seen := map[int]bool{root: true}
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				tree = append(tree, descendant{pid: c, ppid: p})
				queue = append(queue, c)
			}
		}
	}
	return tree, nil
}

// parentOf reads the parent pid of pid from /proc/<pid>/stat; ok is false
// when the process is gone.
func parentOf(pid int) (ppid int, ok bool) {
	_, ppid, ok = procState(pid)
	return ppid, ok
}

// procState reads the state letter and the parent pid of pid from
// /proc/<pid>/stat; ok is false when the process is gone.
func procState(pid int) (state byte, ppid int, ok bool) {
	state, ppid, _, ok = procStat(pid)
	return state, ppid, ok
}

// procStat reads the state letter, the parent pid and the process group id
// of pid from /proc/<pid>/stat; ok is false when the process is gone.
func procStat(pid int) (state byte, ppid, pgrp int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name in parentheses may hold anything, ')' included; the
	// state, the parent pid and the group follow its last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return 0, 0, 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, 0, 0, false
	}
	pgrp, err = strconv.Atoi(string(fields[2]))
	return fields[0][0], ppid, pgrp, err == nil
}

// gone reports whether a process in state has ended: a zombie or dead.
func gone(state byte) bool {
	return state == 'Z' || state == 'X' || state == 'x'
}

// lingering reports whether a process of group pgid, or with subreaper any
// descendant of the caller, is still running. The group's members are all
// below a subreaper, wherever their parents died. A /proc that cannot be
// listed reports none: the kill and the sweep that follow do not depend on it.
func lingering(pgid int, subreaper bool) bool {
	if subreaper {
		tree, err := descendants(os.Getpid())
		if err != nil {
			return false
		}
		for _, d := range tree {
			if state, _, ok := procState(d.pid); ok && !gone(state) {
				return true
			}
		}
		return false
	}
	d, err := os.Open("/proc")
	if err != nil {
		return false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return false
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if state, _, pgrp, ok := procStat(pid); ok && pgrp == pgid && !gone(state) {
			return true
		}
	}
	return false
}

// halted reports whether a process in state can run no more of its own
// code: stopped, stopped by a tracer, a zombie or dead.
func halted(state byte) bool {
	switch state {
	case 'T', 't', 'Z', 'X', 'x':
		return true
	}
	return false
}

// maxStopPasses bounds how often stopThenKill lists and stops the tree
// before it kills what it holds anyway; the sweep then goes on with what
// is left.
const maxStopPasses = 50

// stopThenKill stops every process of the tree below root and then kills
// them. tree is a first listing of it, parents before their children.
//
// A stop alone would not hold: a process not yet stopped may send SIGCONT
// to one that is, or fork a child the listing missed. So the tree is listed
// again and again, new processes stopped and any found running stopped
// again, until two passes in a row find nothing new and every process
// halted: then none of them can run, fork or continue another, and they are
// killed, children before their parents, so that none is continued by its
// parent's death (PR_SET_PDEATHSIG) either.
//
// Each process is pinned by a pidfd when it is first stopped, so a pid
// reaped and reused meanwhile by an unrelated process is never signalled.
// Where a pidfd cannot be had (a kernel before 5.3, the supervisor out of
// descriptors), the bare pid is signalled, each time only while its parent
// is still one of the tree.
func stopThenKill(root int, tree []descendant) {
	var pins []pin
	pinned := map[int]bool{}
	defer func() {
		for _, p := range pins {
			if p.fd >= 0 {
				unix.Close(p.fd)
			}
		}
	}()
	inTree := func(ppid int) bool {
		return pinned[ppid] || ppid == root
	}
	stable := 0
	for pass := 0; pass < maxStopPasses && stable < 2; pass++ {
		if pass > 0 {
			var err error
			if tree, err = descendants(root); err != nil {
				break
			}
		}
		settled := true
		for _, d := range tree {
			if pinned[d.pid] {
				continue
			}
			settled = false
			p, ok := pinProcess(d, inTree)
			if !ok {
				continue // gone
			}
			pinned[d.pid] = true
			pins = append(pins, p)
			p.signal(unix.SIGSTOP, inTree)
		}
		for _, p := range pins {
			// A pid whose parent is no longer of the tree was reaped and
			// reused: its process is gone.
			if state, ppid, ok := procState(p.pid); ok && !halted(state) && p.ours(ppid, inTree) {
				settled = false
				p.signal(unix.SIGSTOP, inTree)
			}
		}
		if settled {
			stable++
		} else {
			stable = 0
		}
	}
	for i := len(pins) - 1; i >= 0; i-- {
		pins[i].signal(unix.SIGKILL, inTree)
	}
}

// pin is a process of the tree being ended, with the parent it was listed
// with, and its pidfd, or -1 when only its bare pid can be signalled.
type pin struct{ pid, ppid, fd int }

// pinProcess pins d: it is the process the listing saw if, once pinned, its
// parent is still the one listed or another process of the tree (the root
// when its own parent died). ok is false when it is gone.
func pinProcess(d descendant, inTree func(ppid int) bool) (pin, bool) {
	fd, err := unix.PidfdOpen(d.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return pin{}, false
	}
	if err != nil {
		fd = -1 // no pidfd here: the bare pid, checked at each signal
	}
	p := pin{pid: d.pid, ppid: d.ppid, fd: fd}
	if ppid, ok := parentOf(d.pid); !ok || !p.ours(ppid, inTree) {
		if fd >= 0 {
			unix.Close(fd)
		}
		return pin{}, false
	}
	return p, true
}

// ours reports whether a process whose parent is now ppid is still the one
// p was listed as: its parent is the listed one or another of the tree.
func (p pin) ours(ppid int, inTree func(ppid int) bool) bool {
	return ppid == p.ppid || inTree(ppid)
}

func (p pin) signal(sig unix.Signal, inTree func(ppid int) bool) {
	if p.fd >= 0 {
		_ = unix.PidfdSendSignal(p.fd, sig, nil, 0)
		return
	}
	if ppid, ok := parentOf(p.pid); ok && p.ours(ppid, inTree) {
		_ = unix.Kill(p.pid, sig)
	}
}
