//go:build unix && !linux

package jsrunner

import "os"

// fileStamp identifies one version of a file without reading it. Without a
// portable change time it never vouches for content on its own: racy always
// holds, so the cache re-hashes files on these systems.
type fileStamp struct {
	size  int64
	mode  os.FileMode
	mtime int64
}

func stampOf(path string) (fileStamp, bool) {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	return fileStamp{size: info.Size(), mode: info.Mode(), mtime: info.ModTime().UnixNano()}, true
}

func (s fileStamp) sameFile(o fileStamp) bool { return s == o }

func (s fileStamp) racy() bool { return true }
