package mailbox

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libos/libos/objects"
)

// roundTrip posts one message to recipient and reads it back with ack=true,
// each in its own synced commit, as a send followed by a receive does.
func roundTrip(b *testing.B, s *objects.Store, recipient int64) {
	err := s.Update(func(tx *objects.Txn) error {
		_, err := Post(tx, Message{Sender: "process:1", Recipient: recipient, Body: "ping", Payload: []byte(`{"n":1}`)}, t0)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	err = s.Update(func(tx *objects.Txn) error {
		p, err := Read(tx, recipient, Filter{Limit: DefaultLimit}, true, 1<<20, t0)
		if err == nil && len(p.AckedIDs) == 0 {
			err = fmt.Errorf("read of %d acked nothing", recipient)
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func reportRoundTrips(b *testing.B, s *objects.Store) {
	if secs := b.Elapsed().Seconds(); secs > 0 {
		b.ReportMetric(float64(b.N)/secs, "roundtrips/s")
	}
	b.ReportMetric(float64(s.Stats().SyncedCommits)/float64(b.N), "commits/op")
}

// BenchmarkPostReadAck: one goroutine, post then read(ack) on one queue.
func BenchmarkPostReadAck(b *testing.B) {
	s, _ := openStore(b)
	b.ResetTimer()
	for range b.N {
		roundTrip(b, s, 1)
	}
	b.StopTimer()
	reportRoundTrips(b, s)
}

// BenchmarkPostReadAckParallel: many goroutines, each on its own queue, so
// their synced commits can share WAL syncs.
func BenchmarkPostReadAckParallel(b *testing.B) {
	s, _ := openStore(b)
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		recipient := next.Add(1)
		for pb.Next() {
			roundTrip(b, s, recipient)
		}
	})
	b.StopTimer()
	reportRoundTrips(b, s)
}

// BenchmarkReadUnreadWithHistory reads one new unread message from a queue
// that already holds a long acknowledged history; the unread index keeps
// the cost independent of the history.
func BenchmarkReadUnreadWithHistory(b *testing.B) {
	for _, history := range []int{0, 10000} {
		b.Run(fmt.Sprintf("acked=%d", history), func(b *testing.B) {
			s, _ := openStore(b)
			const recipient = 1
			for done := 0; done < history; {
				err := s.Update(func(tx *objects.Txn) error {
					for i := 0; i < 1000 && done < history; i++ {
						if _, err := Post(tx, Message{Sender: "process:2", Recipient: recipient, Body: "old"}, t0); err != nil {
							return err
						}
						done++
					}
					_, err := Read(tx, recipient, Filter{Limit: MaxLimit}, true, 1<<30, t0)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				roundTrip(b, s, recipient)
			}
			b.StopTimer()
			if secs := b.Elapsed().Seconds(); secs > 0 {
				b.ReportMetric(float64(b.N)/secs, "roundtrips/s")
			}
		})
	}
}

// Paging through a long queue: pageQueue messages read pageSize at a time.
const (
	pageQueue = 10000
	pageSize  = 100
	pageEdge  = 10 // pages taken at each end of a pass
)

// fillQueue posts n small messages to recipient, 1000 to a commit.
func fillQueue(b *testing.B, s *objects.Store, recipient int64, n int) {
	b.Helper()
	for done := 0; done < n; {
		err := s.Update(func(tx *objects.Txn) error {
			for i := 0; i < 1000 && done < n; i++ {
				if _, err := Post(tx, Message{Sender: "process:2", Recipient: recipient, Body: "page me", Payload: []byte(`{"n":1}`)}, t0); err != nil {
					return err
				}
				done++
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// pageCosts collects what the first and the last pages of each pass cost.
type pageCosts struct{ first, last []time.Duration }

// add takes one pass's per-page times, in page order.
func (c *pageCosts) add(b *testing.B, pages []time.Duration) {
	if len(pages) < 2*pageEdge {
		b.Fatalf("a pass read %d pages, want at least %d", len(pages), 2*pageEdge)
	}
	c.first = append(c.first, pages[:pageEdge]...)
	c.last = append(c.last, pages[len(pages)-pageEdge:]...)
}

// report prints the median cost of the first and of the last pages (the
// median, since a collection or a compaction now and then makes one page
// many times slower) and their ratio: near 1 when what a page costs does not
// depend on where it starts.
func (c *pageCosts) report(b *testing.B) {
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	first, last := median(c.first), median(c.last)
	b.ReportMetric(first, "ns/first-page")
	b.ReportMetric(last, "ns/last-page")
	b.ReportMetric(last/first, "last/first")
}

// BenchmarkPageThrough reads a queue of 10,000 messages end to end, 100 at a
// time, and reports what its first and last pages cost (the median of the
// ten at each end, the read alone, not its commit).
//
//   - ack: Read of unread messages with ack=true, each page in its own
//     Update, as an agent drains its queue; every pass has a fresh queue.
//   - ids: Read by exact ids (include_acked, ack=false) of the next 100.
//   - list-skip: List from the oldest, skipping the seqs already read, which
//     is all a caller paging with List could do before ListAfter.
//   - list-after: ListAfter from the last seq read.
func BenchmarkPageThrough(b *testing.B) {
	b.Run("ack", func(b *testing.B) {
		s, _ := openStore(b)
		var c pageCosts
		for i := range b.N {
			recipient := int64(i + 1)
			b.StopTimer()
			fillQueue(b, s, recipient, pageQueue)
			b.StartTimer()
			var pages []time.Duration
			for more := true; more; {
				err := s.Update(func(tx *objects.Txn) error {
					start := time.Now()
					p, err := Read(tx, recipient, Filter{Limit: pageSize}, true, 1<<30, t0)
					pages = append(pages, time.Since(start))
					if err == nil && len(p.AckedIDs) != pageSize {
						err = fmt.Errorf("page %d acked %d messages", len(pages), len(p.AckedIDs))
					}
					more = p.HasMore
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			c.add(b, pages)
		}
		c.report(b)
	})
	b.Run("ids", func(b *testing.B) {
		s, _ := openStore(b)
		const recipient = 1
		fillQueue(b, s, recipient, pageQueue)
		var c pageCosts
		for range b.N {
			var pages []time.Duration
			for from := uint64(1); from <= pageQueue; from += pageSize {
				want := make([]string, 0, pageSize)
				for seq := from; seq < from+pageSize; seq++ {
					want = append(want, FormatID(recipient, seq))
				}
				err := s.View(func(tx *objects.Txn) error {
					start := time.Now()
					p, err := Read(tx, recipient, Filter{IncludeAcked: true, MessageIDs: &want, Limit: pageSize}, false, 1<<30, t0)
					pages = append(pages, time.Since(start))
					if err == nil && len(p.Messages) != pageSize {
						err = fmt.Errorf("page from %d holds %d messages", from, len(p.Messages))
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			c.add(b, pages)
		}
		c.report(b)
	})
	b.Run("list-skip", func(b *testing.B) {
		s, _ := openStore(b)
		const recipient = 1
		fillQueue(b, s, recipient, pageQueue)
		var c pageCosts
		for range b.N {
			var pages []time.Duration
			for after := uint64(0); after < pageQueue; after += pageSize {
				err := s.View(func(tx *objects.Txn) error {
					start := time.Now()
					n := 0
					err := List(tx, recipient, func(m *Message) error {
						if m.Seq <= after {
							return nil
						}
						if n++; n == pageSize {
							return objects.ErrStopScan
						}
						return nil
					})
					pages = append(pages, time.Since(start))
					if err == nil && n != pageSize {
						err = fmt.Errorf("page after %d holds %d messages", after, n)
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			c.add(b, pages)
		}
		c.report(b)
	})
	b.Run("list-after", func(b *testing.B) {
		s, _ := openStore(b)
		const recipient = 1
		fillQueue(b, s, recipient, pageQueue)
		var c pageCosts
		for range b.N {
			var pages []time.Duration
			for after := uint64(0); after < pageQueue; after += pageSize {
				err := s.View(func(tx *objects.Txn) error {
					start := time.Now()
					n := 0
					err := ListAfter(tx, recipient, after, func(m *Message) error {
						if m.Seq != after+uint64(n)+1 {
							return fmt.Errorf("page after %d: seq %d at %d", after, m.Seq, n)
						}
						if n++; n == pageSize {
							return objects.ErrStopScan
						}
						return nil
					})
					pages = append(pages, time.Since(start))
					if err == nil && n != pageSize {
						err = fmt.Errorf("page after %d holds %d messages", after, n)
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			c.add(b, pages)
		}
		c.report(b)
	})
}
