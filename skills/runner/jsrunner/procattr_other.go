//go:build unix && !linux

package jsrunner

import "syscall"

// procAttr puts a worker in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
