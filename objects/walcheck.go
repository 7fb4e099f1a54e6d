package objects

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble replays a write-ahead log up to its first chunk that does not
// verify and drops the rest as the torn tail of an interrupted write. That
// is right for a tail that was never synced, and wrong for damage in the
// middle of the log: every commit after it was acknowledged and would be
// dropped without a word. Pebble tells the two apart only when a later
// chunk in a later 32 KiB block carries a synced offset, so checkWAL looks
// at the whole file itself before Pebble replays it.
//
// A WAL is a sequence of 32 KiB blocks of chunks. A chunk's header is a
// checksum (4 bytes, over everything after it), the payload length (2), the
// chunk type (1) and the log number (4); in the "WAL sync" format an 8-byte
// offset up to which the log was synced when the chunk was written follows.
// Fewer than a header's bytes at the end of a block are zero padding.
const (
	walBlockSize      = 32 << 10
	walShortHeader    = 11 // checksum, length, type, log number
	walSyncHeader     = 19 // ... and the synced offset
	walTypeShortFirst = 5  // recyclable chunk types 5..8
	walTypeShortLast  = 8
	walTypeSyncFirst  = 9 // WAL sync chunk types 9..12
	walTypeSyncLast   = 12
)

var walCRCTable = crc32.MakeTable(crc32.Castagnoli)

// walChecksum is Pebble's chunk checksum: CRC-32C, rotated and offset.
func walChecksum(b []byte) uint32 {
	c := crc32.Checksum(b, walCRCTable)
	return (c>>15 | c<<17) + 0xa282ead8
}

// walChunk is one chunk that verifies.
type walChunk struct {
	end          int    // offset just past the payload
	logNum       uint32 // the log number in the header
	synced       bool   // the chunk carries a synced offset
	syncedOffset uint64
}

// parseWALChunk returns the chunk at off if its header is well formed, it
// fits in its block and its checksum verifies. The log number is not
// checked: callers compare it.
func parseWALChunk(data []byte, off int) (walChunk, bool) {
	blockEnd := min((off/walBlockSize+1)*walBlockSize, len(data))
	if off < 0 || off+walShortHeader > blockEnd {
		return walChunk{}, false
	}
	typ := data[off+6]
	var header int
	var c walChunk
	switch {
	case typ >= walTypeShortFirst && typ <= walTypeShortLast:
		header = walShortHeader
	case typ >= walTypeSyncFirst && typ <= walTypeSyncLast:
		header = walSyncHeader
		c.synced = true
	default:
		return walChunk{}, false
	}
	if off+header > blockEnd {
		return walChunk{}, false
	}
	c.end = off + header + int(binary.LittleEndian.Uint16(data[off+4:off+6]))
	if c.end > blockEnd {
		return walChunk{}, false
	}
	if walChecksum(data[off+6:c.end]) != binary.LittleEndian.Uint32(data[off:off+4]) {
		return walChunk{}, false
	}
	c.logNum = binary.LittleEndian.Uint32(data[off+7 : off+11])
	if c.synced {
		c.syncedOffset = binary.LittleEndian.Uint64(data[off+11 : off+19])
	}
	return c, true
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// walLoss describes acknowledged commits lost in a WAL.
type walLoss struct {
	badOffset int // first position that is not a valid chunk of the log
	proof     string
}

// scanWAL reports whether the log numbered num, whose bytes are data, lost
// acknowledged commits: whether the first place where the log stops
// verifying was synced, and so acknowledged, before the crash or close
// that left the log. Proof of that, after the place:
//
//   - the log's end-of-log trailer: the log was closed cleanly, after every
//     commit in it was synced;
//   - a chunk that says the log was synced beyond the place;
//   - chunks that show two syncs completing after the first of them was
//     written. The second sync's flush began after the first sync ended, so
//     after the damaged chunk was written, and covered it. (Pebble
//     under-reports synced offsets, so the previous proof alone would miss
//     damage near the end of a log.)
//   - in a log written before the store used WAL sync chunks, which carry
//     no synced offsets: the place holds a chunk that fails its checksum
//     (not zeros, not a whole chunk of another log left in a recycled file)
//     and a valid chunk of this log follows. A crash that persisted
//     unsynced writes out of order could leave the same; such logs come
//     only from older versions, and a store moves to the new format at its
//     first open.
//
// The end of a log (zeros, leftovers of a recycled file, the trailer, a
// torn write) is never loss. Damage to the last commits of a log that was
// not closed cleanly, within two syncs of its end, looks exactly like an
// unsynced write a crash tore or persisted out of order, and is not found.
func scanWAL(data []byte, num uint32) *walLoss {
	off := 0
	for off < len(data) {
		blockEnd := min((off/walBlockSize+1)*walBlockSize, len(data))
		if blockEnd-off < walShortHeader {
			off = blockEnd
			continue
		}
		if c, ok := parseWALChunk(data, off); ok && c.logNum == num {
			off = c.end
			continue
		}
		// A block tail too short for a sync header is zero padding.
		if blockEnd-off < walSyncHeader && allZero(data[off:blockEnd]) {
			off = blockEnd
			continue
		}
		break
	}
	if off >= len(data) {
		return nil
	}
	bad := off
	// Pebble closes a log with an end-of-log trailer: a header with no
	// checksum, no payload and the next log number.
	trailer := make([]byte, walShortHeader)
	trailer[6] = walTypeShortFirst
	binary.LittleEndian.PutUint32(trailer[7:], num+1)
	if bytes.HasPrefix(data[bad:], trailer) {
		return nil
	}
	damaged := true
	if allZero(data[bad:min(bad+walShortHeader, len(data))]) {
		damaged = false
	} else if c, ok := parseWALChunk(data, bad); ok && c.logNum != num {
		damaged = false // a leftover of a recycled log
	}

	// Look for chunks of this log after the bad place: a header holds the
	// log number 7 bytes in, which finds candidates fast; the checksum
	// confirms them. They come in the order they were written, so their
	// synced offsets never decrease.
	var pattern [4]byte
	binary.LittleEndian.PutUint32(pattern[:], num)
	syncs, last := 0, uint64(0) // distinct synced offsets seen, the last one
	from := bad + 1 + 7
	for from < len(data) {
		i := bytes.Index(data[from:], pattern[:])
		if i < 0 {
			break
		}
		at := from + i - 7
		from += i + 1
		c, ok := parseWALChunk(data, at)
		if !ok || c.logNum != num {
			continue
		}
		if !c.synced {
			if damaged {
				return &walLoss{badOffset: bad,
					proof: fmt.Sprintf("valid records written after it follow (the first at offset %d)", at)}
			}
			continue
		}
		if c.syncedOffset > uint64(bad) {
			return &walLoss{badOffset: bad,
				proof: fmt.Sprintf("the record at offset %d says the log was synced up to offset %d", at, c.syncedOffset)}
		}
		if syncs == 0 || c.syncedOffset != last {
			syncs, last = syncs+1, c.syncedOffset
		}
		if syncs == 3 {
			return &walLoss{badOffset: bad,
				proof: fmt.Sprintf("records written after it show two later syncs of the log (the second seen at offset %d)", at)}
		}
	}
	// The trailer found after the bad place proves the log was written past
	// it and closed. (A recycled file cannot hold this trailer from its
	// previous life: the log before this one was still live when this one
	// was created, so it was not the file recycled.)
	if i := bytes.Index(data[bad+1:], trailer); i >= 0 {
		at := bad + 1 + i
		return &walLoss{badOffset: bad,
			proof: fmt.Sprintf("the log was closed cleanly after it (end-of-log trailer at offset %d)", at)}
	}
	return nil
}

// walLogNum parses the log number from a WAL file name such as 000012.log.
func walLogNum(name string) (uint32, bool) {
	base := filepath.Base(name)
	digits, ok := strings.CutSuffix(base, ".log")
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}

// checkWAL reads the WAL at name through fs and returns an error wrapping
// ErrCorrupt if it lost acknowledged commits.
func checkWAL(fs vfs.FS, name string) error {
	num, ok := walLogNum(name)
	if !ok {
		return nil
	}
	f, err := fs.Open(name)
	if err != nil {
		return fmt.Errorf("check write-ahead log %s: %w", name, err)
	}
	data, err := io.ReadAll(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("check write-ahead log %s: %w", name, err)
	}
	loss := scanWAL(data, num)
	if loss == nil {
		return nil
	}
	return corruptError(name, fmt.Errorf(
		"write-ahead log damaged at offset %d, and %s: commits acknowledged after the damage would be lost",
		loss.badOffset, loss.proof))
}

// corruptAdvice tells an operator how to proceed with a corrupt store.
const corruptAdvice = "libos does not repair a store silently: restore the runtime directory from a backup copy, " +
	"or move it aside and start again"

// corruptError wraps ErrCorrupt with the file and the cause.
func corruptError(path string, cause error) error {
	return fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, path, quietCause{cause}, corruptAdvice)
}

// quietCause drops the placeholder line Pebble joins to a corruption error
// to carry its details: it means nothing to an operator.
type quietCause struct{ err error }

func (c quietCause) Error() string {
	return strings.ReplaceAll(c.err.Error(), "\n<corruption detail carrier>", "")
}

func (c quietCause) Unwrap() error { return c.err }
