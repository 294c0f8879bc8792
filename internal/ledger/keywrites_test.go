package ledger

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// keyWrites is what a step sent to pebble: keys written (Set or Delete), by
// the prefix of their table or order.
type keyWrites map[byte]uint64

func (w keyWrites) total() (n uint64) {
	for _, c := range w {
		n += c
	}
	return n
}

func (w keyWrites) String() string {
	var ps []byte
	for p := range w {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var b strings.Builder
	for _, p := range ps {
		name := string(p)
		if p < 'a' {
			name = fmt.Sprintf("0x%02x", p)
		}
		fmt.Fprintf(&b, " %s:%d", name, w[p])
	}
	return fmt.Sprintf("%d (%s )", w.total(), b.String())
}

// writesOf applies cmds in one batch to f (on disk) and returns the keys
// the batch's commit wrote.
func writesOf(t *testing.T, f *FSM, idx *uint64, cmds ...Command) keyWrites {
	t.Helper()
	before := f.s.store.Writes()
	logs := make([]*raft.Log, 0, len(cmds))
	for _, c := range cmds {
		*idx++
		logs = append(logs, &raft.Log{Index: *idx, Term: 1, Type: raft.LogCommand, Data: Encode(c)})
	}
	for i, out := range f.ApplyBatch(logs) {
		if res, ok := out.(Result); !ok || res.Outcome == OutcomeInvalid {
			t.Fatalf("command %d (%T): %+v", i, cmds[i], out)
		}
	}
	w := keyWrites{}
	for p, n := range f.s.store.Writes() {
		if d := n - before[p]; d > 0 {
			w[byte(p)] = d
		}
	}
	return w
}

// TestKeyWritesPerSubmission counts the pebble keys a submission writes over
// its life on every replica (docs/benchmarks.md, "Current figures"): its
// Admit (a new structured key, its job QUEUED), the job's Lease, Heartbeat
// and Complete, and the Expires of its entry and of its finished job. Each
// count is pinned: a change of layout that writes more fails here. The
// counters (0x01) are written once per batch whatever it holds.
func TestKeyWritesPerSubmission(t *testing.T) {
	dir := t.TempDir()
	f := openFSM(t, dir, Options{})
	var idx uint64
	// A first submission of the client, so that its watermark and the
	// tenant's counters exist: the one measured is a steady client's.
	warm := structured("acme", "client-1", 1, "n1", t0)
	if w := writesOf(t, f, &idx, Admit{Reserve: warm, Outcome: QueueCommit(commit(warm, t0))}); w[pfxTenantWMs] != 1 {
		t.Errorf("a tenant's first watermark wrote %v, want its count (0x03) once", w)
	}

	now := t0 + sec
	r := structured("acme", "client-1", 2, "n1", now)
	admit := writesOf(t, f, &idx, Admit{Reserve: r, Outcome: QueueCommit(commit(r, now))})
	r3 := structured("acme", "client-1", 3, "n1", now)
	pair := writesOf(t, f, &idx, Admit{Reserve: r3, Outcome: QueueCommit(commit(r3, now))})
	lease := writesOf(t, f, &idx, Lease{Tenant: "acme", Holder: "w", Max: 1, LeaseIDs: []string{"l1"},
		Now: now, Expiry: now + 30*sec})
	heartbeat := writesOf(t, f, &idx, Heartbeat{Tenant: "acme", JobID: warm.JobID, LeaseID: "l1", Now: now, Expiry: now + 60*sec})
	complete := writesOf(t, f, &idx, Complete{Tenant: "acme", JobID: warm.JobID, LeaseID: "l1",
		Result: json.RawMessage(`{"ok":true}`), Now: now})
	expEntries := writesOf(t, f, &idx, Expire{Now: now + commitTTL, WatermarkTTL: 24 * time.Hour})
	expJob := writesOf(t, f, &idx, Expire{Now: now + jobTTL, WatermarkTTL: 24 * time.Hour})
	for _, c := range []struct {
		name string
		got  keyWrites
		want uint64
	}{
		// 0x01 0x02, e, x, w, and the job: j, s, t, q, u, z. Not 0x03
		// (the client's watermark exists).
		{"admit", admit, 11},
		{"another admit", pair, 11},
		// 0x01, j, q, u, z out, l in (the tenant's bytes unchanged). The
		// lease's expiry is in memory only (jobDue, jobLeaseExp).
		{"lease", lease, 6},
		// 0x01, j: the job's orders do not hold its lease's expiry.
		{"heartbeat", heartbeat, 2},
		// 0x01 0x02, j, l out, y, z in.
		{"complete", complete, 6},
		// 0x01 0x02, and per entry e, x; the client's watermark w once.
		{"expire of three entries", expEntries, 9},
		// 0x01 0x02, j, s, t, y, z.
		{"expire of a job", expJob, 7},
	} {
		t.Logf("%s: %v", c.name, c.got)
		if c.got.total() != c.want {
			t.Errorf("%s wrote %v keys, want %d", c.name, c.got, c.want)
		}
	}
	// The counters written only when they change are what a reopen reads.
	bytes, wms := maps.Clone(f.s.tenantBytes), maps.Clone(f.s.wmTenant)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := openFSM(t, dir, Options{})
	if !maps.Equal(g.s.tenantBytes, bytes) || !maps.Equal(g.s.wmTenant, wms) {
		t.Errorf("reopened: tenant bytes %v watermarks %v, want %v %v", g.s.tenantBytes, g.s.wmTenant, bytes, wms)
	}
}
