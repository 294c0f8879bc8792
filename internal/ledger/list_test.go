package ledger

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// listAll pages through a tenant's jobs and returns their IDs. Listing
// oldest first from the start, it also pages newest first and checks that
// it finds exactly the reverse: every test of a filter checks both orders.
func listAll(t *testing.T, f *FSM, tenant string, opts ListOptions) (ids []string, pages int) {
	t.Helper()
	ids, pages = listPages(t, f, tenant, opts)
	if !opts.Desc && opts.After == 0 {
		opts.Desc = true
		if desc, _ := listPages(t, f, tenant, opts); !reflect.DeepEqual(desc, reversed(ids)) {
			t.Fatalf("%q %+v: newest first %v, want the reverse of %v", tenant, opts, desc, ids)
		}
	}
	return ids, pages
}

// listPages pages through a tenant's jobs in opts' order.
func listPages(t *testing.T, f *FSM, tenant string, opts ListOptions) (ids []string, pages int) {
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
			if st := j.State().String(); opts.Status != "" && st != opts.Status {
				t.Fatalf("job of status %q listed for filter %q", st, opts.Status)
			}
			if !opts.Desc && (j.Seq <= opts.After || (i > 0 && j.Seq <= jobs[i-1].Seq)) {
				t.Fatalf("seq %d out of order (after %d)", j.Seq, opts.After)
			}
			if opts.Desc && ((opts.After != 0 && j.Seq >= opts.After) || (i > 0 && j.Seq >= jobs[i-1].Seq)) {
				t.Fatalf("seq %d out of order newest first (before %d)", j.Seq, opts.After)
			}
			ids = append(ids, j.ID)
		}
		// next is the last job's Seq, or past it (in the page's order)
		// when the walk stopped on MaxListSkips.
		if len(jobs) > 0 {
			last := jobs[len(jobs)-1].Seq
			if (!opts.Desc && next < last) || (opts.Desc && next > last) || (!more && next != last) {
				t.Fatalf("next %d, last seq %d (desc %v)", next, last, opts.Desc)
			}
		}
		if !more {
			return ids, pages
		}
		if !opts.Desc && next <= opts.After {
			t.Fatalf("next %d does not move past %d", next, opts.After)
		}
		if opts.Desc && (next == 0 || (opts.After != 0 && next >= opts.After)) {
			t.Fatalf("next %d does not move below %d", next, opts.After)
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
			if i%7 == 0 {
				h.must(admitWith(r, reject(r, now+1, 422)), OutcomeRejected) // rejected: no job
			} else {
				h.must(admitWith(r, commit(r, now+1)), OutcomeCommitted)
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
					// Newest first: exactly the reverse, in as many pages.
					desc, descPages := listAll(t, h.f, tn, ListOptions{Type: typ, Status: status, Limit: limit, Desc: true})
					if !reflect.DeepEqual(desc, reversed(ids)) || descPages != pages {
						t.Fatalf("%s newest first: got %d jobs in %d pages %v\nwant the reverse of %v in %d", name, len(desc), descPages, desc, ids, pages)
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
		h.apply(admitWith(r, commit(r, now+1)))
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
		{"acme", ListOptions{After: 1, Desc: true}},
		{"acme", ListOptions{Status: "pending", Desc: true}},
		{"acme", ListOptions{Type: "unknown", Desc: true}},
		{"nobody", ListOptions{Desc: true}},
		{"", ListOptions{Desc: true}},
		{"ac", ListOptions{Desc: true}},
	} {
		if jobs, next, more := h.f.ListJobs(tc.tenant, tc.opts); len(jobs) != 0 || next != 0 || more {
			t.Fatalf("%q %+v: %d jobs, next %d, more %v", tc.tenant, tc.opts, len(jobs), next, more)
		}
	}
	// Newest first: the first page ends at the newest job, a cursor of
	// MaxUint64 is "before everything", the limit cap holds.
	if jobs, _, more := h.f.ListJobs("big", ListOptions{Limit: 5000, Desc: true}); len(jobs) != api.MaxListLimit || !more {
		t.Fatalf("limit cap newest first: %d jobs, more %v", len(jobs), more)
	}
	newest, _, _ := h.f.ListJobs("acme", ListOptions{Limit: 1, Desc: true})
	if all := want["acme/"]; len(newest) != 1 || newest[0].ID != all[len(all)-1] {
		t.Fatalf("newest first: %+v, want %s", newest, all[len(all)-1])
	}
	if jobs, _, _ := h.f.ListJobs("acme", ListOptions{Limit: 1, Desc: true, After: ^uint64(0)}); len(jobs) != 1 || jobs[0].ID != newest[0].ID {
		t.Fatalf("newest first before MaxUint64: %+v", jobs)
	}
	// A cursor stays valid when jobs before or after it are removed.
	first, next, _ := h.f.ListJobs("acme", ListOptions{Limit: 10})
	h.must(Expire{Now: first[0].ExpiresAt}, OutcomeExpired) // removes the first job (and more)
	rest, _, _ := h.f.ListJobs("acme", ListOptions{Limit: 10, After: next})
	if len(rest) == 0 || rest[0].Seq <= next {
		t.Fatalf("page after cursor %d: %+v", next, rest)
	}
}

func reversed[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	r := make([]T, len(s))
	for i, v := range s {
		r[len(s)-1-i] = v
	}
	return r
}

// A rare type behind many queued jobs of another type is found page by
// page: each call walks past at most MaxListSkips jobs, then answers a short
// (here empty) page with a cursor past what it skipped.
func TestListSkipsBounded(t *testing.T) {
	h := newHarness(t)
	bulk := 2*MaxListSkips + 10
	queue := func(key, typ string, now int64) Job {
		r := reserve("acme", key, now)
		r.Request.Type, r.MaxEntries = typ, uint64(2*bulk+1)
		return h.must(admitWith(r, QueueCommit(commit(r, now))), OutcomeCommitted).Job
	}
	var rare Job
	var bulkJobs []Job
	h.quietly(func() {
		for i := range bulk {
			bulkJobs = append(bulkJobs, queue(fmt.Sprintf("b%05d", i), "bulk", t0+int64(i)))
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
	// Newest first, the rare job (the newest) comes first, and the walk
	// on goes past the bulk under the same bound: a page with the rare
	// job ends on MaxListSkips, then two more calls (one bounded, one
	// ending at the group's front).
	desc := opts
	desc.Desc = true
	jobs, next, more = h.f.ListJobs("acme", desc)
	if len(jobs) != 1 || jobs[0].ID != rare.ID || !more || next >= rare.Seq {
		t.Fatalf("first call newest first: %d jobs, next %d, more %v; want the rare job and a cursor below it", len(jobs), next, more)
	}
	if want := bulkJobs[len(bulkJobs)-MaxListSkips].Seq; next != want {
		t.Fatalf("first call newest first: next %d, want %d (MaxListSkips below the rare job)", next, want)
	}
	if ids, pages := listAll(t, h.f, "acme", desc); !reflect.DeepEqual(ids, []string{rare.ID}) || pages != 3 {
		t.Fatalf("found %v in %d calls newest first; want the rare job in 3", ids, pages)
	}
	// Behind a bulk newer than it, a rare job is reached page by page
	// newest first too.
	h.quietly(func() {
		for i := range bulk {
			queue(fmt.Sprintf("c%05d", i), "bulk", t0+int64(bulk+1+i))
		}
	})
	if jobs, next, more := h.f.ListJobs("acme", desc); len(jobs) != 0 || !more || next == 0 {
		t.Fatalf("newest first behind a newer bulk: %d jobs, next %d, more %v; want an empty page with a cursor", len(jobs), next, more)
	}
	if ids, pages := listAll(t, h.f, "acme", desc); !reflect.DeepEqual(ids, []string{rare.ID}) || pages != 5 {
		t.Fatalf("found %v in %d calls newest first; want the rare job in 5", ids, pages)
	}
	// A walk that skips nothing is not bounded: one page of 1000 bulk jobs.
	if jobs, _, more := h.f.ListJobs("acme", ListOptions{Status: JobQueued.String(), Type: "bulk", Limit: 1000}); len(jobs) != 1000 || !more {
		t.Fatalf("bulk page: %d jobs, more %v", len(jobs), more)
	}
}

// TestListJobsLeavesOutGoneJobs: with Now, a job past its retention but not
// yet removed by an Expire (Gone at Now, as a read at Now judges it) is not
// listed, wherever it falls in a page (first, between two, last of all):
// each page still holds Limit jobs when that many follow, and paging in
// either order finds every other job once. One nanosecond before, every job
// is listed.
func TestListJobsLeavesOutGoneJobs(t *testing.T) {
	h := newHarness(t)
	boundary := t0 + 100*sec
	gone := map[int]bool{0: true, 3: true, 4: true, 11: true}
	var all, live []string
	for i := range 12 {
		r := reserve("acme", fmt.Sprintf("k%02d", i), t0+int64(i))
		c := commit(r, t0+int64(i))
		if gone[i] {
			c.JobExpiresAt = boundary
		}
		h.must(admitWith(r, c), OutcomeCommitted)
		all = append(all, r.JobID)
		if !gone[i] {
			live = append(live, r.JobID)
		}
	}
	for _, tc := range []struct {
		now  int64
		want []string
	}{{boundary, live}, {boundary - 1, all}, {0, all}} {
		for _, limit := range []int{1, 2, 3, 5, 100} {
			for _, status := range []string{"", api.JobStatusCommitted} {
				opts := ListOptions{Limit: limit, Status: status, Now: tc.now}
				ids, pages := listAll(t, h.f, "acme", opts)
				if !reflect.DeepEqual(ids, tc.want) {
					t.Fatalf("%+v: got %v, want %v", opts, ids, tc.want)
				}
				if want := (len(tc.want) + limit - 1) / limit; pages != want {
					t.Fatalf("%+v: %d pages, want %d", opts, pages, want)
				}
			}
		}
	}
	// The Expire at the boundary removes what the list left out.
	h.must(expire(boundary), OutcomeExpired)
	if ids, _ := listAll(t, h.f, "acme", ListOptions{Limit: 5}); !reflect.DeepEqual(ids, live) {
		t.Fatalf("after the Expire: %v, want %v", ids, live)
	}
}
