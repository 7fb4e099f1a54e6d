package mailbox

import (
	"fmt"
	"sync/atomic"
	"testing"

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
