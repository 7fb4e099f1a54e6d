package objects

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// EventsBefore returns up to limit events with seq lower than beforeSeq in
// descending order (newest first); beforeSeq 0 means from the newest event,
// limit 0 means no limit. A reader that wants the latest few events of a
// long log (the recent calls of one process) reads back from the end instead
// of scanning the whole log.
func (s *Store) EventsBefore(beforeSeq uint64, limit int) ([]Event, error) {
	if limit < 0 {
		return nil, fmt.Errorf("objects: events before: %w: limit: must not be negative, got %d", ErrInvalid, limit)
	}
	if err := s.begin(); err != nil {
		return nil, fmt.Errorf("objects: events before: %w", err)
	}
	defer s.ops.Done()
	if beforeSeq == 1 {
		return nil, nil
	}
	upper := prefixEnd([]byte(prefixEvents))
	if beforeSeq != 0 {
		upper = eventKey(beforeSeq)
	}
	events, err := s.readEventsReverse(upper, limit)
	if err != nil {
		return nil, fmt.Errorf("objects: events before: %w", err)
	}
	return events, nil
}

func (s *Store) readEventsReverse(upper []byte, limit int) (events []Event, err error) {
	defer recoverFatal(&err)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixEvents), UpperBound: upper})
	if err != nil {
		return nil, s.readErr(err)
	}
	wait := s.locals.lastCommit()
	for ok := it.Last(); ok && (limit == 0 || len(events) < limit); ok = it.Prev() {
		seq, derr := eventSeqFromKey(it.Key())
		if derr != nil {
			err = derr
			break
		}
		value, verr := it.ValueAndErr()
		if verr != nil {
			err = verr
			break
		}
		e, derr := decodeEvent(seq, value)
		if derr != nil {
			err = fmt.Errorf("event %d: %w", seq, derr)
			break
		}
		events = append(events, e)
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, s.readErr(err)
	}
	if werr := wait.wait(); werr != nil {
		return nil, fmt.Errorf("read state that failed to sync: %w", werr)
	}
	return events, nil
}
