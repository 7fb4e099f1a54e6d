package jsrunner

import (
	"os"
	"syscall"
	"time"
)

// fileStamp identifies one version of a file without reading it: any write
// changes its size, modification or change time, and a replacement (a new
// file, or a symbolic link that now leads elsewhere) changes its device and
// inode. Links are followed, so a link's target is what is stamped.
type fileStamp struct {
	dev, ino    uint64
	size        int64
	mode        os.FileMode
	mtime       int64
	ctime       int64
	stampedUnix int64 // when the stamp was taken, to tell a racy stamp
}

func stampOf(path string) (fileStamp, bool) {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{}, false
	}
	return fileStamp{
		dev:         st.Dev,
		ino:         st.Ino,
		size:        st.Size,
		mode:        info.Mode(),
		mtime:       st.Mtim.Nano(),
		ctime:       st.Ctim.Nano(),
		stampedUnix: time.Now().UnixNano(),
	}, true
}

func (s fileStamp) sameFile(o fileStamp) bool {
	return s.dev == o.dev && s.ino == o.ino && s.size == o.size && s.mode == o.mode && s.mtime == o.mtime && s.ctime == o.ctime
}

// racy reports whether a write could have happened after the stamp without
// changing it: file times come from a coarse clock, so a stamp taken within
// racyWindow of the file's last change cannot vouch for the content.
func (s fileStamp) racy() bool {
	return s.stampedUnix-max(s.mtime, s.ctime) < int64(racyWindow)
}

const racyWindow = 100 * time.Millisecond
