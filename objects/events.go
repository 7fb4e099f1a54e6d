package objects

import "fmt"

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
	events, err := s.scanEvents([]byte(prefixEvents), upper, limit, true)
	if err != nil {
		return nil, fmt.Errorf("objects: events before: %w", err)
	}
	return events, nil
}
