package ledger

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// listAll pages through a tenant's jobs and returns their IDs.
func listAll(t *testing.T, f *FSM, tenant string, opts ListOptions) (ids []string, pages int) {
	t.Helper()
	for {
		jobs, next, more := f.ListJobs(tenant, opts)
		pages++
		for i, j := range jobs {
			if j.Tenant != tenant {
				t.Fatalf("job of tenant %q listed for %q", j.Tenant, tenant)
			}
			if opts.Type != "" && j.Type != opts.Type {
				t.Fatalf("job of type %q listed for filter %q", j.Type, opts.Type)
			}
			if opts.Status != "" && j.Status != opts.Status {
				t.Fatalf("job of status %q listed for filter %q", j.Status, opts.Status)
			}
			if j.Seq <= opts.After || (i > 0 && j.Seq <= jobs[i-1].Seq) {
				t.Fatalf("seq %d out of order (after %d)", j.Seq, opts.After)
			}
			ids = append(ids, j.ID)
		}
		// next is the last job's Seq, or past it when the walk stopped
		// on MaxListSkips.
		if len(jobs) > 0 && (next < jobs[len(jobs)-1].Seq || !more && next != jobs[len(jobs)-1].Seq) {
			t.Fatalf("next %d, last seq %d", next, jobs[len(jobs)-1].Seq)
		}
		if !more {
			return ids, pages
		}
		if next <= opts.After {
			t.Fatalf("next %d does not move past %d", next, opts.After)
		}
		opts.After = next
	}
}

func TestListJobs(t *testing.T) {
	h := newHarness(t)
	want := map[string][]string{} // "tenant/type" and "tenant/" → IDs in commit order
	now := t0
	h.quietly(func() {
		for i := range 250 {
			tn := []string{"acme", "globex"}[i%2]
			typ := []string{"send_invoice", "resize_image", "noop"}[i%3]
			r := reserve(tn, fmt.Sprintf("k%03d", i), now)
			r.Request.Type = typ
			h.must(r, OutcomeReserved)
			if i%7 == 0 {
				h.must(reject(r, now+1, 422), OutcomeRejected) // rejected: no job
			} else {
				h.must(commit(r, now+1), OutcomeCommitted)
				want[tn+"/"] = append(want[tn+"/"], r.JobID)
				want[tn+"/"+typ] = append(want[tn+"/"+typ], r.JobID)
			}
			now += 2
		}
	})
	for _, tn := range []string{"acme", "globex"} {
		for _, typ := range []string{"", "send_invoice", "resize_image", "noop"} {
			for _, limit := range []int{1, 7, 100, 1000} {
				for _, status := range []string{"", api.JobStatusCommitted} {
					name := fmt.Sprintf("%s/type=%s/limit=%d/status=%s", tn, typ, limit, status)
					ids, pages := listAll(t, h.f, tn, ListOptions{Type: typ, Status: status, Limit: limit})
					if !reflect.DeepEqual(ids, want[tn+"/"+typ]) {
						t.Fatalf("%s: got %d jobs %v\nwant %d %v", name, len(ids), ids, len(want[tn+"/"+typ]), want[tn+"/"+typ])
					}
					if wantPages := max(1, (len(ids)+limit-1)/limit); pages != wantPages {
						t.Fatalf("%s: %d pages, want %d", name, pages, wantPages)
					}
				}
			}
		}
	}

	// Defaults and bounds of Limit.
	if jobs, _, more := h.f.ListJobs("acme", ListOptions{}); len(jobs) != api.DefaultListLimit || !more {
		t.Fatalf("default limit: %d jobs, more %v", len(jobs), more)
	}
	for i := range 1100 {
		r := reserve("big", fmt.Sprintf("k%d", i), now)
		r.MaxEntries = 1 << 20
		h.apply(r)
		h.apply(commit(r, now+1))
	}
	if jobs, _, more := h.f.ListJobs("big", ListOptions{Limit: 5000}); len(jobs) != api.MaxListLimit || !more {
		t.Fatalf("limit cap: %d jobs, more %v", len(jobs), more)
	}
	// Filters that match nothing; tenants that do not exist.
	for _, tc := range []struct {
		tenant string
		opts   ListOptions
	}{
		{"acme", ListOptions{Status: "pending"}},
		{"acme", ListOptions{Type: "unknown"}},
		{"nobody", ListOptions{}},
		{"", ListOptions{}},
		{"ac", ListOptions{}}, // a prefix of a tenant
		{"acme", ListOptions{After: 1 << 62}},
		{"acme", ListOptions{After: ^uint64(0)}},
	} {
		if jobs, next, more := h.f.ListJobs(tc.tenant, tc.opts); len(jobs) != 0 || next != 0 || more {
			t.Fatalf("%q %+v: %d jobs, next %d, more %v", tc.tenant, tc.opts, len(jobs), next, more)
		}
	}
	// A cursor stays valid when jobs before or after it are removed.
	first, next, _ := h.f.ListJobs("acme", ListOptions{Limit: 10})
	h.must(Expire{Now: first[0].ExpiresAt}, OutcomeExpired) // removes the first job (and more)
	rest, _, _ := h.f.ListJobs("acme", ListOptions{Limit: 10, After: next})
	if len(rest) == 0 || rest[0].Seq <= next {
		t.Fatalf("page after cursor %d: %+v", next, rest)
	}
}

// A rare type behind many queued jobs of another type is found page by
// page: each call walks past at most MaxListSkips jobs, then answers a short
// (here empty) page with a cursor past what it skipped.
func TestListSkipsBounded(t *testing.T) {
	h := newHarness(t)
	bulk := 2*MaxListSkips + 10
	queue := func(key, typ string, now int64) Job {
		r := reserve("acme", key, now)
		r.Request.Type, r.MaxEntries = typ, uint64(bulk+1)
		h.must(r, OutcomeReserved)
		return h.must(QueueCommit(commit(r, now)), OutcomeCommitted).Job
	}
	var rare Job
	h.quietly(func() {
		for i := range bulk {
			queue(fmt.Sprintf("b%05d", i), "bulk", t0+int64(i))
		}
		rare = queue("rare", "rare", t0+int64(bulk))
	})
	opts := ListOptions{Status: JobQueued.String(), Type: "rare", Limit: 10}
	jobs, next, more := h.f.ListJobs("acme", opts)
	if len(jobs) != 0 || !more || next == 0 {
		t.Fatalf("first call: %d jobs, next %d, more %v; want an empty page with a cursor", len(jobs), next, more)
	}
	ids, pages := listAll(t, h.f, "acme", opts)
	if !reflect.DeepEqual(ids, []string{rare.ID}) || pages != 3 {
		t.Fatalf("found %v in %d calls; want the rare job in 3 (two bounded walks, then the rest)", ids, pages)
	}
	// A walk that skips nothing is not bounded: one page of 1000 bulk jobs.
	if jobs, _, more := h.f.ListJobs("acme", ListOptions{Status: JobQueued.String(), Type: "bulk", Limit: 1000}); len(jobs) != 1000 || !more {
		t.Fatalf("bulk page: %d jobs, more %v", len(jobs), more)
	}
}
