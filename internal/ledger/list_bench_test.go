package ledger

import (
	"os"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/pkg/api"
)

// BenchmarkListPageOfMillion: one op is one page of GET /v1/jobs (100
// jobs, the gate's 4 MiB page bound) at the ledger, for a tenant holding
// 1,000,000 queued jobs in the disk store, as the web console asks for it:
// the first page, a page near the end of the million (after a cursor),
// and a page half-way through with a state filter and with a type filter. Filling
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
	}{
		{"first", ListOptions{Limit: 100}},
		{"deep", ListOptions{Limit: 100, After: at(n - 1000)}},
		{"state", ListOptions{Limit: 100, Status: api.JobStatusQueued, After: at(n / 2)}},
		{"type", ListOptions{Limit: 100, Type: "send_invoice", After: at(n / 2)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := c.opts
			opts.MaxBytes = maxBytes
			b.ReportAllocs()
			for range b.N {
				if jobs, _, more := f.ListJobs("acme", opts); len(jobs) != 100 || !more {
					b.Fatalf("%d jobs (more %v), want 100 and more", len(jobs), more)
				}
			}
		})
	}
}
