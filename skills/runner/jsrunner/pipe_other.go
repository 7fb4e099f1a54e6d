//go:build !linux

package jsrunner

import "os"

// blockingPipe is os.Pipe with both ends in blocking mode (see the Linux
// version for why the poller is kept out).
func blockingPipe() (r, w *os.File, err error) {
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, err
	}
	r.Fd()
	w.Fd()
	return r, w, nil
}
