//go:build !linux

package jsrunner

// graphWatch is Linux-only (inotify); elsewhere every lookup of a cached
// bundle checks its files' stamps.
type graphWatch struct{}

type watchDeps struct{}

func newGraphWatch() *graphWatch { return &graphWatch{} }

func (w *graphWatch) close() {}

func (w *graphWatch) arm(absDir string, files []graphFile) *watchDeps { return nil }

func (w *graphWatch) trusted(deps *watchDeps) bool { return false }
