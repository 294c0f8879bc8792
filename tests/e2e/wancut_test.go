package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/localcluster"
)

// TestMultiDCWANCut cuts the network between dc1 and dc2 (every process of
// both keeps running; only the links between the datacenters go) for longer
// than a committed entry lives. A job for both datacenters through dc1's
// gate is then 503 and held by dc1 alone, and dc2's gate cannot reach dc1
// either. After the heal, with no client retrying, dc1's outbox brings the
// job to dc2 under the same ID although its entry expired during the cut.
func TestMultiDCWANCut(t *testing.T) {
	f := startFederation(t, func(o *localcluster.Options) {
		o.Failpoints = true
		o.Env = append(o.Env, "IDEMPOTENCY_COMMITTED_TTL_SECONDS=4", "IDEMPOTENCY_REJECTED_TTL_SECONDS=4")
	})
	ctx := ctxFor(t, 3*time.Minute)
	hc := &http.Client{Timeout: 30 * time.Second}
	g1 := f.DC("dc1").GateURLs()[0]
	g2 := f.DC("dc2").GateURLs()[0]

	if err := f.CutWAN(ctx); err != nil {
		t.Fatal(err)
	}
	const key = "host1.dc1:777:1:0123456789abcdef"
	cut, err := post(ctx, hc, g1, key, `{"type":"demo","payload":{"n":1},"datacenters":["dc1","dc2"]}`)
	if err != nil || cut.status != http.StatusServiceUnavailable {
		t.Fatalf("through dc1 during the cut: %d %s %v, want 503", cut.status, cut.body, err)
	}
	var inDC1 string
	for _, j := range listDC(ctx, t, g1, "dc1") {
		if j.IdempotencyKey == key {
			inDC1 = j.JobID
		}
	}
	if inDC1 == "" {
		t.Fatalf("dc1 does not hold its part of the job of %s", key)
	}
	const key2 = "host2.dc2:777:1:0123456789abcdef"
	other, err := post(ctx, hc, g2, key2, `{"type":"demo","payload":{"n":2},"datacenters":["dc1","dc2"]}`)
	if err != nil || other.status != http.StatusServiceUnavailable {
		t.Fatalf("through dc2 during the cut: %d %s %v, want 503", other.status, other.body, err)
	}

	// The cut outlasts the entry: wait until dc1 no longer holds the key.
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g1+"/v1/idempotency-keys/"+key+"?datacenter=dc1", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound, "dc1's entry of the key to expire during the cut"
	})
	if err := f.HealWAN(ctx); err != nil {
		t.Fatal(err)
	}
	var inDC2 string
	for _, j := range listDC(ctx, t, g2, "dc2") {
		if j.IdempotencyKey == key2 {
			inDC2 = j.JobID
		}
	}
	if inDC2 == "" {
		t.Fatalf("dc2 does not hold its part of the job of %s", key2)
	}
	// Each outbox brings its datacenter's job to the other.
	for _, want := range []struct{ gate, dc, key, id string }{{g2, "dc2", key, inDC1}, {g1, "dc1", key2, inDC2}} {
		testutil.WaitFor(t, 2*time.Minute, func() (bool, string) {
			for _, j := range listDC(ctx, t, want.gate, want.dc) {
				if j.IdempotencyKey == want.key {
					if j.JobID != want.id {
						t.Fatalf("%s holds the job of %s as %s, the other datacenter as %s", want.dc, want.key, j.JobID, want.id)
					}
					return true, ""
				}
			}
			return false, "the outbox to bring the job of " + want.key + " to " + want.dc + " after the heal"
		})
	}
}
