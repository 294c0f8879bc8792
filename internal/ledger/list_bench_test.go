package ledger

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/pkg/api"
)

// BenchmarkListPageOfMillion: one op is one page of GET /v1/jobs (100
// jobs, the gate's 4 MiB page bound) at the ledger, for a tenant holding
// 1,000,000 queued jobs in the disk store, as the web console asks for it:
// the first page, a page near the end of the million (after a cursor),
// a page half-way through with a state filter and with a type filter, and
// the 100 jobs of a rare type queued after the million, by type and by
// state and type (one call of which passes over MaxListSkips queued jobs of
// the other type, then answers an empty page with a cursor). Filling
// takes most of the run (ONCE_LIST_BENCH_JOBS changes the count):
//
//	go test -tags hashicorpmetrics -run '^$' -bench ListPageOfMillion -benchtime 200x -timeout 30m ./internal/ledger/
func BenchmarkListPageOfMillion(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("ONCE_LIST_BENCH_JOBS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			b.Fatalf("ONCE_LIST_BENCH_JOBS=%q: want an integer of at least 1000", s)
		}
		n = v
	}
	f := benchFSM(b, "disk", Options{})
	g := &benchLog{live: 1 << 40, queue: true} // nothing expires
	var buf, logs []*raft.Log
	for i := 0; i < n; i++ {
		logs = append(logs, g.next(buf)...)
		if len(logs) >= 4096 || i == n-1 {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
	// Then 100 jobs of a rare type: a filter of state and type walks the
	// state's jobs of other types to reach them (the worst case), a filter
	// of type alone seeks to them.
	now := t0 + int64(n)*int64(time.Millisecond)
	idx := g.idx
	for i := range 100 {
		r := reserve("acme", fmt.Sprintf("rare-%d", i), now)
		r.Request.Type, r.MaxEntries = "rare", 1<<30
		for _, c := range []Command{admitWith(r, QueueCommit(commit(r, now)))} {
			idx++
			logs = append(logs, &raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(c)})
		}
	}
	f.ApplyBatch(logs)
	logs = logs[:0]
	n += 100
	if st := f.Stats(); st.Queued != n {
		b.Fatalf("%d queued jobs, want %d", st.Queued, n)
	}
	const maxBytes = 4 << 20 // the gate's page bound
	// Job sequence numbers grow by about a fixed step in this log: the k-th
	// job's is near first + k*step, which makes cursors deep into the list.
	head, _, _ := f.ListJobs("acme", ListOptions{Limit: 2})
	if len(head) != 2 {
		b.Fatal("fewer than two jobs")
	}
	first, step := head[0].Seq, head[1].Seq-head[0].Seq
	at := func(k int) uint64 { return first + uint64(k)*step - 1 } // a cursor before the k-th job
	for _, c := range []struct {
		name string
		opts ListOptions
		jobs int  // on the page
		more bool // a page follows
	}{
		{"first", ListOptions{Limit: 100}, 100, true},
		{"deep", ListOptions{Limit: 100, After: at(n - 1100)}, 100, true},
		// Newest first: the newest page, and one 1100 jobs from the oldest.
		{"desc", ListOptions{Limit: 100, Desc: true}, 100, true},
		{"desc-deep", ListOptions{Limit: 100, Desc: true, After: at(1100) + 1}, 100, true},
		{"state", ListOptions{Limit: 100, Status: api.JobStatusQueued, After: at(n / 2)}, 100, true},
		{"type", ListOptions{Limit: 100, Type: "send_invoice", After: at(n / 2)}, 100, true},
		{"type-rare", ListOptions{Limit: 100, Type: "rare"}, 100, false},
		// One call passes over MaxListSkips jobs of the other type and
		// answers an empty page with a cursor past them.
		{"state-type-rare", ListOptions{Limit: 100, Status: api.JobStatusQueued, Type: "rare"}, 0, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := c.opts
			opts.MaxBytes = maxBytes
			b.ReportAllocs()
			for range b.N {
				if jobs, _, more := f.ListJobs("acme", opts); len(jobs) != c.jobs || more != c.more {
					b.Fatalf("%d jobs (more %v), want %d (more %v)", len(jobs), more, c.jobs, c.more)
				}
			}
		})
	}
}
