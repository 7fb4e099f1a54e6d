package server

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/libos/libos/kernel"
)

// The read endpoints a console and a polling Host call most (the listing,
// one process, the approvals) read every process record or scan the log;
// their answers are cached and kept exact by the hub, which reads the log
// and says what each entry changed. Every change the kernel makes to a
// process is logged under its pid, but for the budget charges a call makes
// up the ancestor chain, which the hub places through the tree it learns
// from spawn entries.

// maxCachedDetails bounds the cached process details.
const maxCachedDetails = 4096

type cachedDetail struct {
	v    version
	body []byte
}

type caches struct {
	mu      sync.Mutex
	details map[int64]cachedDetail

	// listMu serializes refreshes of the listing.
	listMu    sync.Mutex
	list      map[int64]kernel.ProcessInfo
	listEpoch uint64

	approvalsMu sync.Mutex
	approvals   []kernel.Approval
	approvalsV  version
	approvalsOK bool
}

func newCaches() *caches { return &caches{details: map[int64]cachedDetail{}} }

// detail is GET /processes/{pid}'s body: Inspect, from the cache when no
// entry about pid was logged since.
func (s *Server) detail(pid int64) ([]byte, error) {
	v, current := s.hub.pidVersion(pid)
	s.cache.mu.Lock()
	c, ok := s.cache.details[pid]
	s.cache.mu.Unlock()
	if current && ok && c.v == v {
		return c.body, nil
	}
	d, err := s.rt.InspectWithArguments(pid, s.hub.arguments(pid))
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	if !current {
		return b, nil
	}
	s.cache.mu.Lock()
	if len(s.cache.details) >= maxCachedDetails {
		clear(s.cache.details)
	}
	s.cache.details[pid] = cachedDetail{v: v, body: b}
	s.cache.mu.Unlock()
	return b, nil
}

// processes is every process by pid: the records whose rows changed are read
// again, the rest come from the cache.
func (s *Server) processes() ([]kernel.ProcessInfo, uint64, error) {
	s.cache.listMu.Lock()
	defer s.cache.listMu.Unlock()
	before := s.rt.Store().LastEventSeq()
	seq, current := s.hub.lastSeq()
	if !current {
		// The reader catches up in the background: read every record.
		s.cache.list = nil
		ps, err := s.rt.Processes()
		return ps, before, err
	}
	dirty, epoch := s.hub.takeDirty()
	if s.cache.list == nil || epoch != s.cache.listEpoch || len(dirty) > len(s.cache.list)/4 {
		ps, err := s.rt.Processes()
		if err != nil {
			s.cache.list = nil
			return nil, 0, err
		}
		s.cache.list = make(map[int64]kernel.ProcessInfo, len(ps))
		for _, p := range ps {
			s.cache.list[p.PID] = p
		}
		s.cache.listEpoch = epoch
	} else {
		for pid := range dirty {
			p, err := s.rt.Process(pid)
			switch {
			case errors.Is(err, kernel.ErrNoProcess):
				delete(s.cache.list, pid)
			case err != nil:
				s.cache.list = nil
				return nil, 0, err
			default:
				s.cache.list[pid] = p
			}
		}
	}
	out := make([]kernel.ProcessInfo, 0, len(s.cache.list))
	for _, p := range s.cache.list {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b kernel.ProcessInfo) int { return int(a.PID - b.PID) })
	return out, seq, nil
}

// approvalList is GET /approvals's list, read again only after an entry
// that changes it.
func (s *Server) approvalList() ([]kernel.Approval, error) {
	s.cache.approvalsMu.Lock()
	defer s.cache.approvalsMu.Unlock()
	v, current := s.hub.approvalVersion()
	if current && s.cache.approvalsOK && s.cache.approvalsV == v {
		return s.cache.approvals, nil
	}
	var list []kernel.Approval
	var err error
	if current {
		list, v, err = s.hub.approvals()
	} else {
		list, err = s.rt.Approvals()
	}
	if err != nil {
		s.cache.approvalsOK = false
		return nil, err
	}
	if list == nil {
		list = []kernel.Approval{}
	}
	s.cache.approvals, s.cache.approvalsV, s.cache.approvalsOK = list, v, current
	return list, nil
}
