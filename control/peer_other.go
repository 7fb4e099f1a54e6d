//go:build !linux

package control

import "net"

// unixPeerCred is not implemented here: the standard library reads peer
// credentials only on Linux, so the socket's owner-only mode is the check.
func unixPeerCred(*net.UnixConn) (peerCred, error) {
	return peerCred{}, errPeerCredUnsupported
}
