package manager

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// TestOmittedListRetryAfterExpiryThroughAnotherDatacenter: a job without a
// datacenters list ran in dc1; its key expired in both datacenters while dc1
// retains the job. A retry through a dc2 gate makes dc2 its home and asks
// dc1 for a claim. dc1 must not hand the key to dc2 while it still holds the
// job (or, for a structured key, while its watermark refuses the sequence):
// a single datacenter answers such a retry with the retained job (opaque
// key) or idempotency_key_expired (structured key), and in a federation the
// datacenter that ran the job answers it the same way, never a second job in
// dc2 (docs/multidc.md, "The same job ID everywhere").
func TestOmittedListRetryAfterExpiryThroughAnotherDatacenter(t *testing.T) {
	for _, tt := range []struct {
		name, key string
		want      int
	}{
		{"opaque", "order-expired-1", http.StatusCreated},
		{"structured", "host1.dc1:12345:1:0123456789abcdef", http.StatusConflict},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startTwoDCs(t)
			send := func(srv *httptest.Server) answer {
				return post(t, srv, tt.key, `{"type":"demo","payload":{"n":1}}`, api.HeaderIdempotencyTTL, "1")
			}
			first := send(f.g1).job(t)
			if len(first.Datacenters) != 1 || first.Datacenters["dc1"].Status != api.JobStatusCommitted {
				t.Fatalf("datacenters %+v, want dc1 alone", first.Datacenters)
			}
			// Both entries expire and are removed (a structured key's
			// watermark is raised then); dc1 retains the job.
			waitEntriesGone(t, tt.key, f.dc1, f.dc2)
			if _, ok := f.dc1.mgrs[f.dc1.leader()].FSM().Job("default", first.JobID); !ok {
				t.Fatal("dc1 no longer retains the job")
			}

			again := send(f.g2)
			if again.status != tt.want {
				t.Fatalf("retry through dc2: %d %s, want %d", again.status, again.body, tt.want)
			}
			if tt.want == http.StatusCreated {
				var j api.Job
				if err := json.Unmarshal(again.body, &j); err != nil {
					t.Fatal(err)
				}
				if j.JobID != first.JobID {
					t.Fatalf("retry through dc2 answered job %s, want dc1's %s", j.JobID, first.JobID)
				}
			}
			if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1 != 1 || n2 != 0 {
				t.Fatalf("dc1 holds %d jobs and dc2 %d, want 1 and 0", n1, n2)
			}
		})
	}
}

// TestOtherFormAfterExpiryFindsTheRetainedJob: an opaque key whose entries
// expired while its job is retained, retried in the request's other form (an
// omitted datacenters list and the list naming its home alone are one
// request: docs/multidc.md), is answered with that job, as a retry in the
// same form is (TestOmittedListRetryAfterExpiryThroughAnotherDatacenter),
// never a second job.
func TestOtherFormAfterExpiryFindsTheRetainedJob(t *testing.T) {
	f := startTwoDCs(t)
	for _, c := range []struct {
		key               string
		firstVia, thenVia *httptest.Server
		first, then       string
		home              *testCluster
	}{
		// Omitted first (home dc1), then ["dc1"] through a dc2 gate.
		{"order-other-form-1", f.g1, f.g2, `{"type":"demo"}`, `{"type":"demo","datacenters":["dc1"]}`, f.dc1},
		// ["dc2"] first, then omitted through a dc1 gate: dc2 answers the
		// claim round with its retained job.
		{"order-other-form-2", f.g2, f.g1, `{"type":"demo","datacenters":["dc2"]}`, `{"type":"demo"}`, f.dc2},
	} {
		send := func(srv *httptest.Server, body string) answer {
			return post(t, srv, c.key, body, api.HeaderIdempotencyTTL, "1")
		}
		first := send(c.firstVia, c.first).job(t)
		waitEntriesGone(t, c.key, f.dc1, f.dc2)
		if _, ok := c.home.mgrs[c.home.leader()].FSM().Job("default", first.JobID); !ok {
			t.Fatal("the home no longer retains the job")
		}
		again := send(c.thenVia, c.then)
		if again.status != http.StatusCreated {
			t.Fatalf("%s: the other form after expiry: %d %s, want 201", c.key, again.status, again.body)
		}
		if j := again.job(t); j.JobID != first.JobID {
			t.Fatalf("%s: the other form after expiry answered job %s, want the retained %s", c.key, j.JobID, first.JobID)
		}
	}
	if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1 != 1 || n2 != 1 {
		t.Fatalf("dc1 holds %d jobs and dc2 %d, want 1 and 1", n1, n2)
	}
}
