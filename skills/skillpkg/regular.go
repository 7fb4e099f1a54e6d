package skillpkg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotRegular is matched by OpenRegular's refusal of a path that is not a
// regular file.
var ErrNotRegular = errors.New("is not a regular file")

// OpenFunc opens a path like os.OpenFile, or like an os.Root's OpenFile.
type OpenFunc func(name string, flag int, perm fs.FileMode) (*os.File, error)

// OpenRegular opens name for reading through open and returns it only when
// it is a regular file. Opening a FIFO for reading blocks until a writer
// appears, and reading a device may never end, so the file is opened
// without blocking (where the platform can) and its type is checked on the
// open descriptor before anything is read: a file swapped after an earlier
// Stat cannot slip through. Other refusals match ErrNotRegular.
func OpenRegular(open OpenFunc, name string) (*os.File, error) {
	f, err := open(name, os.O_RDONLY|openNonblocking, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: it is a %s", ErrNotRegular, FileKind(info.Mode()))
	}
	return f, nil
}

// FileKind names the type of a file that is not a regular one, for the
// refusals that say what was found instead.
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "folder"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file of mode " + m.Type().String()
}
