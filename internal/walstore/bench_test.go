package walstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftbench "github.com/hashicorp/raft/bench"
)

// Both stores are durable: walstore fsyncs every batch, raft-boltdb commits
// (and fsyncs) a bolt transaction per call.
//
//	go test -tags hashicorpmetrics -run '^$' -bench . -benchmem ./internal/walstore/

type benchStore struct {
	name string
	open func(b *testing.B) raft.LogStore
}

var benchStores = []benchStore{
	{"walstore", func(b *testing.B) raft.LogStore {
		s, err := Open(filepath.Join(b.TempDir(), "wal"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"boltdb", func(b *testing.B) raft.LogStore {
		s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "raft.db")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

// BenchmarkRaftBench runs hashicorp/raft's own LogStore harness
// (github.com/hashicorp/raft/bench) against both stores, side by side.
func BenchmarkRaftBench(b *testing.B) {
	cases := []struct {
		name string
		fn   func(*testing.B, raft.LogStore)
	}{
		{"FirstIndex", raftbench.FirstIndex},
		{"LastIndex", raftbench.LastIndex},
		{"GetLog", raftbench.GetLog},
		{"StoreLog", raftbench.StoreLog},
		{"StoreLogs", raftbench.StoreLogs},
		// raftbench.DeleteRange stores indexes 0-2, 10-12, 20-22, ... in one
		// StoreLogs call. A monotonic store rejects that batch
		// (ErrOutOfOrder), so walstore skips it; DeleteRangeMonotonic is the
		// same workload with consecutive indexes, for both stores.
		{"DeleteRange", raftbench.DeleteRange},
		{"DeleteRangeMonotonic", deleteRangeMonotonic},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for _, st := range benchStores {
				b.Run(st.name, func(b *testing.B) {
					if c.name == "DeleteRange" && st.name == "walstore" {
						b.Skip("raftbench.DeleteRange writes gapped indexes; see DeleteRangeMonotonic")
					}
					c.fn(b, st.open(b))
				})
			}
		})
	}
}

// deleteRangeMonotonic is raftbench.DeleteRange with consecutive indexes:
// three "data" entries per iteration, then each iteration deletes the three
// oldest (prefix compaction, as raft does after a snapshot).
func deleteRangeMonotonic(b *testing.B, store raft.LogStore) {
	logs := make([]*raft.Log, 0, 3*b.N)
	for i := 1; i <= 3*b.N; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Data: []byte("data")})
	}
	if err := store.StoreLogs(logs); err != nil {
		b.Fatalf("err: %s", err)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if err := store.DeleteRange(uint64(3*n+1), uint64(3*n+3)); err != nil {
			b.Fatalf("err: %s", err)
		}
	}
}

// BenchmarkConcurrent measures the stores under concurrency, in two shapes.
// One op is one StoreLogs of 64 entries of 256 bytes (fsynced); entries/s
// and reads/s are throughputs over the same interval. Writers share a lock
// that assigns the next indexes, because a raft log has one ordered writer;
// with several writers the lock hand-off is part of the cost.
//
//   - followers-N: one writer (raft's leader loop) and N followers, each a
//     goroutine that reads every new entry once with GetLog, as raft's
//     replication goroutines do (N=2: a 3-node cluster, N=4: 5 nodes). The
//     interval ends when every follower has read every entry.
//   - wW-rR: W writers while R readers call GetLog in a tight loop on the
//     1024 newest entries. This saturates the CPUs, so the writers also
//     compete with the readers for a processor.
func BenchmarkConcurrent(b *testing.B) {
	for _, followers := range []int{2, 4} {
		b.Run(fmt.Sprintf("followers-%d", followers), func(b *testing.B) {
			for _, st := range benchStores {
				b.Run(st.name, func(b *testing.B) { benchFollowers(b, st.open(b), followers) })
			}
		})
	}
	for _, sh := range []struct{ writers, readers int }{{1, 4}, {4, 4}} {
		b.Run(fmt.Sprintf("w%d-r%d", sh.writers, sh.readers), func(b *testing.B) {
			for _, st := range benchStores {
				b.Run(st.name, func(b *testing.B) { benchSaturated(b, st.open(b), sh.writers, sh.readers) })
			}
		})
	}
}

const (
	benchBatch     = 64
	benchEntrySize = 256
)

// benchLog appends batches of benchBatch entries to a store.
type benchLog struct {
	store raft.LogStore
	data  []byte
	mu    sync.Mutex
	next  uint64
	last  atomic.Uint64 // newest durable index
}

func newBenchLog(b *testing.B, store raft.LogStore) *benchLog {
	l := &benchLog{store: store, data: bytes.Repeat([]byte("x"), benchEntrySize), next: 1}
	for range 1024 / benchBatch { // something to read from the start
		if err := l.append(); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

func (l *benchLog) append() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	logs := make([]*raft.Log, benchBatch)
	now := time.Now()
	for i := range logs {
		logs[i] = &raft.Log{Index: l.next + uint64(i), Term: 1, Type: raft.LogCommand, Data: l.data, AppendedAt: now}
	}
	if err := l.store.StoreLogs(logs); err != nil {
		return err
	}
	l.next += benchBatch
	l.last.Store(l.next - 1)
	return nil
}

// runWriters appends b.N batches from writers goroutines and returns when
// they are done.
func (l *benchLog) runWriters(b *testing.B, writers int, after func()) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := l.append(); err != nil {
					b.Errorf("StoreLogs: %v", err)
					return
				}
				after()
			}
		})
	}
	wg.Wait()
}

func benchFollowers(b *testing.B, store raft.LogStore, followers int) {
	l := newBenchLog(b, store)
	var (
		reads   atomic.Int64
		fwg     sync.WaitGroup
		wake    = make([]chan struct{}, followers)
		writing atomic.Bool
	)
	writing.Store(true)
	b.ResetTimer()
	start := time.Now()
	for f := range followers {
		wake[f] = make(chan struct{}, 1)
		fwg.Go(func() {
			var e raft.Log
			cursor := l.last.Load()
			var n int64
			defer func() { reads.Add(n) }()
			for {
				done := !writing.Load()
				for hi := l.last.Load(); cursor < hi; n++ {
					cursor++
					if err := store.GetLog(cursor, &e); err != nil {
						b.Errorf("GetLog(%d): %v", cursor, err)
						return
					}
				}
				if done {
					return // caught up after the last batch
				}
				<-wake[f]
			}
		})
	}
	l.runWriters(b, 1, func() {
		for _, w := range wake {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	})
	writing.Store(false)
	for _, w := range wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	fwg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(reads.Load())/elapsed.Seconds(), "reads/s")
}

func benchSaturated(b *testing.B, store raft.LogStore, writers, readers int) {
	l := newBenchLog(b, store)
	var (
		stop  = make(chan struct{})
		reads atomic.Int64
		rwg   sync.WaitGroup
	)
	for r := range readers {
		rwg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			var e raft.Log
			var n int64
			defer func() { reads.Add(n) }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				hi := l.last.Load()
				idx := hi - rng.Uint64N(min(hi, 1024))
				if err := store.GetLog(idx, &e); err != nil {
					b.Errorf("GetLog(%d): %v", idx, err)
					return
				}
				n++
			}
		})
	}
	b.ResetTimer()
	start := time.Now()
	l.runWriters(b, writers, func() {})
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	rwg.Wait()
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(reads.Load())/elapsed.Seconds(), "reads/s")
}
