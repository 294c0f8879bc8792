package ledger

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/pkg/api"
)

// benchLog produces Reserve+Commit pairs for a steady state of about `live`
// entries and jobs: time advances 1 ms per submission, TTLs are live ms, and an
// Expire follows every 1000 submissions.
type benchLog struct {
	idx  uint64
	n    int
	live int64
	// queue commits version 3 (the job QUEUED); with work, each submission
	// is followed by a Lease of one job (the oldest queued, committed
	// backlog submissions earlier) and its Complete.
	queue   bool
	work    bool
	backlog int
	// whole: benchApply cuts its batches only between submissions (at the
	// first one ending at batch commands or more), never inside one.
	whole bool
}

func (g *benchLog) next(buf []*raft.Log) []*raft.Log {
	buf = buf[:0]
	now := t0 + int64(g.n)*int64(time.Millisecond)
	ttl := g.live * int64(time.Millisecond)
	r := Reserve{
		Tenant: "acme", Key: fmt.Sprintf("host1.dc1:12345:%d:a1b2c3d4e5f6a7b8", g.n),
		Fingerprint: "3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea",
		JobID:       fmt.Sprintf("0193a5c8-0000-7000-8000-%012d", g.n),
		Now:         now, MaxEntries: 1 << 30,
		Request: Request{Type: "send_invoice", Payload: json.RawMessage(`{"order":"ORD-123","amount":4200}`),
			Datacenters: []string{"dc1"}},
		Structured: true, ClientID: "host1.dc1:12345", Sequence: uint64(g.n), Nonce: "a1b2c3d4e5f6a7b8",
	}
	c := Commit{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now, ExpiresAt: now + ttl, JobExpiresAt: now + ttl}
	if g.queue {
		c = QueueCommit(c)
	}
	cmds := [][]byte{Encode(admitWith(r, c))}
	if g.work && g.n >= g.backlog {
		lease := fmt.Sprintf("lease-%d", g.n)
		cmds = append(cmds,
			Encode(Lease{Tenant: r.Tenant, Holder: "worker-1", Max: 1, LeaseIDs: []string{lease}, Now: now, Expiry: now + 30*int64(time.Second)}),
			Encode(Complete{Tenant: r.Tenant, JobID: fmt.Sprintf("0193a5c8-0000-7000-8000-%012d", g.n-g.backlog),
				LeaseID: lease, Result: json.RawMessage(`{"sent":true}`), Now: now}))
	}
	for _, data := range cmds {
		g.idx++
		buf = append(buf, &raft.Log{Index: g.idx, Type: raft.LogCommand, Data: data})
	}
	g.n++
	if g.n%1000 == 0 {
		g.idx++
		buf = append(buf, &raft.Log{Index: g.idx, Type: raft.LogCommand,
			Data: Encode(Expire{Now: now, WatermarkTTL: time.Hour})})
	}
	return buf
}

// BenchmarkApplyAdmit: one op is a submission (an Admit committing its job, and
// an Expire every 1000) against a steady state of ~100k entries and jobs, for
// the state in memory (New) and on disk (Open). Encoding happens outside the
// timer. The ratio of the two in one run is what docs/benchmarks.md reports:
//
//	go test -tags hashicorpmetrics -run '^$' -bench ApplyAdmit -benchtime 200000x ./internal/ledger/
func BenchmarkApplyAdmit(b *testing.B) {
	for _, store := range []string{"memory", "disk"} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("store=%s/batch=%d", store, batch), func(b *testing.B) {
				benchApplyAdmit(b, benchFSM(b, store, Options{OnChange: func(Change) {}}), batch)
			})
		}
	}
}

// BenchmarkApplyAdmitQueued: as BenchmarkApplyAdmit with
// queue commits (QueueCommit: the job QUEUED, in the lifecycle's orders). No worker
// leases them, so the queue grows by every submission (100k before the timer,
// and b.N more): unfinished jobs never expire.
//
// BenchmarkApplyAdmitLeaseComplete: one op is a job's whole life: a
// submission (an Admit, its job QUEUED), then a Lease of one job (the oldest of a
// steady backlog of 100k queued jobs) and its Complete; finished jobs expire
// after their retention (the Expire every 1000).
func BenchmarkApplyAdmitQueued(b *testing.B) {
	for _, store := range []string{"memory", "disk"} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("store=%s/batch=%d", store, batch), func(b *testing.B) {
				benchApply(b, benchFSM(b, store, Options{OnChange: func(Change) {}}), batch,
					&benchLog{live: 100_000, queue: true})
			})
		}
	}
}

func BenchmarkApplyAdmitLeaseComplete(b *testing.B) {
	for _, store := range []string{"memory", "disk"} {
		b.Run(fmt.Sprintf("store=%s/batch=64", store), func(b *testing.B) {
			benchApply(b, benchFSM(b, store, Options{OnChange: func(Change) {}}), 64,
				&benchLog{live: 100_000, queue: true, work: true, backlog: 100_000})
		})
	}
}

// BenchmarkApplyAdmitBounds: the ApplyAdmit workload on the
// memory state, on the disk store, and on the disk store with parts of its
// work taken away (TestingKnobs), all in one run: how close a layout on pebble
// could come to the memory state on this machine (docs/benchmarks.md, "What
// would close the gap, and how close pebble can come"). Batches are cut
// between submissions (32 of them, 64 commands, 65 with an Expire), so that
// a store that writes nothing still finds each Commit's entry among its
// batch's writes.
//
//	go test -tags hashicorpmetrics -run '^$' -bench ApplyAdmitBounds -benchtime 200000x ./internal/ledger/
func BenchmarkApplyAdmitBounds(b *testing.B) {
	for _, c := range []struct {
		name  string
		disk  bool
		knobs TestingKnobs
	}{
		{name: "store=memory"},
		{name: "store=disk", disk: true},
		{name: "store=disk,orders=memory", disk: true, knobs: TestingKnobs{OrdersInMemory: true}},
		{name: "store=disk,orders=memory,removed=kept", disk: true, knobs: TestingKnobs{OrdersInMemory: true, KeepRemoved: true}},
		{name: "store=disk,orders=memory,writes=none", disk: true, knobs: TestingKnobs{OrdersInMemory: true, NoWrites: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := New(Options{OnChange: func(Change) {}})
			if c.disk {
				f = openFSM(b, b.TempDir(), Options{OnChange: func(Change) {}, Store: StoreOptions{Knobs: c.knobs}})
			}
			benchApply(b, f, 64, &benchLog{live: 100_000, whole: true})
		})
	}
}

// benchFSM returns an empty FSM in memory or on disk (in the benchmark's
// temporary directory, closed at its end).
func benchFSM(b *testing.B, store string, opts Options) *FSM {
	if store == "memory" {
		return New(opts)
	}
	return openFSM(b, b.TempDir(), opts)
}

func benchApplyAdmit(b *testing.B, f *FSM, batch int) {
	benchApply(b, f, batch, &benchLog{live: 100_000})
}

func benchApply(b *testing.B, f *FSM, batch int, g *benchLog) {
	var buf []*raft.Log
	for range 100_000 { // warm up to the steady state
		f.ApplyBatch(g.next(buf))
	}
	const chunk = 4096
	logs := make([]*raft.Log, 0, 2*chunk+10)
	ends := make([]int, 0, chunk) // where each submission's commands end in logs
	b.ReportAllocs()
	keysBefore := keysWritten(f)
	settleStore(b, f)
	var cpu time.Duration // the process's CPU while the timer runs
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		if done > 0 {
			cpu += processCPU()
		}
		logs, ends = logs[:0], ends[:0]
		n := min(chunk, b.N-done)
		for range n {
			logs = append(logs, g.next(buf)...)
			ends = append(ends, len(logs))
		}
		cpu -= processCPU()
		b.StartTimer()
		switch {
		case batch == 1:
			for _, l := range logs {
				f.Apply(l)
			}
		case g.whole:
			from := 0
			for _, end := range ends {
				if end-from >= batch || end == len(logs) {
					f.ApplyBatch(logs[from:end])
					from = end
				}
			}
		default:
			for i := 0; i < len(logs); i += batch {
				f.ApplyBatch(logs[i:min(len(logs), i+batch)])
			}
		}
		done += n
	}
	b.StopTimer()
	// The disk store's flush of what the ops wrote and the compactions it
	// leads to are the ops' CPU too (not their time).
	settleStore(b, f)
	cpu += processCPU()
	// The CPU of every thread per op: on the disk store, pebble's flushes
	// and compactions in the background as well as the apply.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if f.s.store != nil { // pebble keys written (Set or Delete) per op, counters included
		b.ReportMetric(float64(keysWritten(f)-keysBefore)/float64(b.N), "keys/op")
	}
	st := f.Stats()
	if g.queue {
		b.ReportMetric(float64(st.Queued), "queued")
		b.ReportMetric(float64(st.Succeeded), "succeeded")
	}
	if g.whole { // rows that must have applied the same workload to the same state
		b.ReportMetric(float64(st.Jobs), "jobs")
		b.ReportMetric(float64(st.Committed), "committed")
	}
}

// keysWritten is how many keys f's store has written to pebble (0 in memory).
func keysWritten(f *FSM) (n uint64) {
	if f.s.store != nil {
		for _, c := range f.s.store.Writes() {
			n += c
		}
	}
	return n
}

type discardSink struct{ n int64 }

func (s *discardSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *discardSink) Close() error                { return nil }
func (s *discardSink) Cancel() error               { return nil }
func (s *discardSink) ID() string                  { return "discard" }

var _ io.Writer = (*discardSink)(nil)

// BenchmarkSnapshotPersist: Snapshot + Persist of ~100k entries, ~100k jobs
// and one watermark, in memory and on disk.
func BenchmarkSnapshotPersist(b *testing.B) {
	for _, store := range []string{"memory", "disk"} {
		b.Run("store="+store, func(b *testing.B) { benchSnapshotPersist(b, benchFSM(b, store, Options{})) })
	}
}

func benchSnapshotPersist(b *testing.B, f *FSM) {
	g := &benchLog{live: 100_000}
	var buf []*raft.Log
	for range 150_000 {
		f.ApplyBatch(g.next(buf))
	}
	st := f.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	var size int64
	for i := 0; i < b.N; i++ {
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		sink := &discardSink{}
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		size = sink.n
	}
	b.SetBytes(size)
	b.ReportMetric(float64(st.Entries), "entries")
	b.ReportMetric(float64(st.Jobs), "jobs")
}

// BenchmarkApplyBatchCommands: one op is a submission (an Admit, and an
// Expire every 1000) against ~100k live entries and jobs, proposed as single
// commands (one entry per submission) or as 64 submissions' Admits in one
// AdmitBatch entry.
// Decoding is inside the timer (Apply decodes); encoding is not.
func BenchmarkApplyBatchCommands(b *testing.B) {
	for _, items := range []int{1, 64} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) {
			f := New(Options{OnChange: func(Change) {}})
			g := &benchLog{live: 100_000}
			var buf []*raft.Log
			for range 100_000 {
				f.ApplyBatch(g.next(buf))
			}
			var idx uint64 = g.idx
			// entries returns the log of n submissions, batched by items.
			entries := func(n int) []*raft.Log {
				var singles []*raft.Log
				for range n {
					singles = append(singles, g.next(buf)...)
				}
				if items == 1 {
					for _, l := range singles {
						idx++
						l.Index = idx
					}
					return singles
				}
				var out []*raft.Log
				var res [][]byte
				flush := func() {
					if len(res) > 0 {
						idx++
						out = append(out, &raft.Log{Index: idx, Type: raft.LogCommand, Data: EncodeBatch(TypeAdmitBatch, res)})
						res = nil
					}
				}
				for _, l := range singles {
					switch CommandType(l.Data[0]) {
					case TypeAdmit:
						res = append(res, l.Data)
					default:
						flush()
						idx++
						l.Index = idx
						out = append(out, l)
					}
					if len(res) == items {
						flush()
					}
				}
				flush()
				return out
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				b.StopTimer()
				n := min(4096, b.N-done)
				logs := entries(n)
				b.StartTimer()
				for _, l := range logs {
					if res, _ := f.Apply(l).(Result); res.Outcome == OutcomeInvalid {
						b.Fatalf("invalid: %v", res.Err)
					}
				}
				done += n
			}
		})
	}
}

// BenchmarkLiveKeysMemory: one op is a submission (an Admit, small
// payload) that stays live (nothing expires); heap-B/key is the heap the FSM
// holds per live key (entry, job, its indexes) after a GC. It measures how
// many live keys fit in a manager's memory (docs/scaling.md):
//
//	go test -tags hashicorpmetrics -run '^$' -bench LiveKeysMemory -benchtime 1000000x ./internal/ledger/
func BenchmarkLiveKeysMemory(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := New(Options{})
	g := &benchLog{live: 1 << 40} // TTLs beyond any run
	var buf []*raft.Log
	for range b.N {
		f.ApplyBatch(g.next(buf))
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if st := f.Stats(); st.Entries != b.N || st.Jobs != b.N {
		b.Fatalf("%d entries and %d jobs live after %d submissions", st.Entries, st.Jobs, b.N)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/key")
	runtime.KeepAlive(f)
}

// BenchmarkListQueuedAfterChurn: one op is the first page of a tenant's
// queued jobs (10 of them) after 20k jobs went through the queue (queued,
// leased, completed), on disk, where those jobs left tombstones in the
// (tenant, state) order until compaction:
//
//	go test -tags hashicorpmetrics -run '^$' -bench ListQueuedAfterChurn ./internal/ledger/
func BenchmarkListQueuedAfterChurn(b *testing.B) {
	f := benchFSM(b, "disk", Options{})
	var idx uint64
	apply := func(cmds ...Command) []Result {
		logs := make([]*raft.Log, len(cmds))
		for i, c := range cmds {
			idx++
			logs[i] = &raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(c)}
		}
		var out []Result
		for _, r := range f.ApplyBatch(logs) {
			out = append(out, r.(Result))
		}
		return out
	}
	submit := func(key string, now int64) []Command {
		r := reserve(tenant, key, now)
		r.MaxEntries = 1 << 30
		return []Command{admitWith(r, QueueCommit(commit(r, now)))}
	}
	const churn, batch = 20_000, 100
	now := tQ
	for n := 0; n < churn; n += batch {
		var cmds []Command
		for i := range batch {
			cmds = append(cmds, submit(fmt.Sprintf("c%06d", n+i), now)...)
		}
		apply(cmds...)
		leased := apply(leaseOf(tenant, batch, now+1))[0]
		if leased.Outcome != OutcomeLeased || len(leased.Lease.Jobs) != batch {
			b.Fatalf("lease: %+v", leased)
		}
		cmds = cmds[:0]
		for _, j := range leased.Lease.Jobs {
			cmds = append(cmds, Complete{Tenant: tenant, JobID: j.ID, LeaseID: j.Life.LeaseID, Now: now + 2})
		}
		apply(cmds...)
		now += 10
	}
	var cmds []Command
	for i := range 10 {
		cmds = append(cmds, submit(fmt.Sprintf("q%d", i), now)...)
	}
	apply(cmds...)
	b.ResetTimer()
	for range b.N {
		if jobs, _, _ := f.ListJobs(tenant, ListOptions{Status: api.JobStatusQueued, Limit: 100}); len(jobs) != 10 {
			b.Fatalf("%d queued", len(jobs))
		}
	}
}

// settleStore flushes a disk store's memtables and waits until pebble has
// run no compaction for 50 ms: what the writes so far cost is spent.
func settleStore(b *testing.B, f *FSM) {
	if f.s.store == nil {
		return
	}
	if err := f.s.store.Sync(); err != nil {
		b.Fatal(err)
	}
	var last int64 = -1
	for {
		m := f.s.store.Metrics()
		if m.Compact.NumInProgress == 0 && m.Compact.Count == last {
			return
		}
		last = m.Compact.Count
		if m.Compact.NumInProgress > 0 {
			last = -1
		}
		time.Sleep(50 * time.Millisecond) // pebble has no wait for its compactions
	}
}
