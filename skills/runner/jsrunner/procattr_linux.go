package jsrunner

import "syscall"

// procAttr puts a worker in its own process group and has the kernel kill
// it if the host thread that started it goes away.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
