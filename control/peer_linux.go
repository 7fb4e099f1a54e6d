package control

import (
	"fmt"
	"net"
	"syscall"
)

// unixPeerCred asks the kernel (SO_PEERCRED) who is at the other end of c.
func unixPeerCred(c *net.UnixConn) (peerCred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peerCred{}, fmt.Errorf("raw connection: %w", err)
	}
	var ucred *syscall.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		ucred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return peerCred{}, fmt.Errorf("raw connection: %w", err)
	}
	if gerr != nil {
		return peerCred{}, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	return peerCred{pid: ucred.Pid, uid: ucred.Uid, gid: ucred.Gid}, nil
}
