package gate

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// TestFedEdgeClaimsCarryNoPayload: an omitted list with a 1 MiB payload in
// a federation of three sends the payload to its home alone: a claim
// records no job, so the claims to the two other datacenters carry none
// (2 MiB less on the WAN, and no copy per datacenter), and the job, its
// retries through every gate, are whole.
func TestFedEdgeClaimsCarryNoPayload(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.MaxBodyBytes = 2 << 20
	})
	var mu sync.Mutex
	sent := map[string]int{} // datacenter: payload bytes of the requests it got
	for i, dc := range []string{"dc1", "dc2", "dc3"} {
		f.m[i].SetSubmitHook(func(_ context.Context, req *rpcpb.SubmitRequest) error {
			mu.Lock()
			sent[dc] += len(req.GetJob().GetPayload())
			mu.Unlock()
			return nil
		})
	}
	payload := fmt.Sprintf("%q", strings.Repeat("a", 1<<20-64))
	body := `{"type":"x","payload":` + payload + `}`
	first := f.g[0].submit(t, skey(1), body)
	job := wantJob(t, first, http.StatusCreated)
	if string(job.Payload) != payload {
		t.Fatalf("the job's payload is %d bytes, want %d", len(job.Payload), len(payload))
	}
	mu.Lock()
	got := fmt.Sprint(sent)
	mu.Unlock()
	if want := fmt.Sprint(map[string]int{"dc1": len(payload), "dc2": 0, "dc3": 0}); got != want {
		t.Fatalf("payload bytes sent per datacenter: %s, want %s", got, want)
	}
	for _, tg := range f.g[1:] {
		res := tg.submit(t, skey(1), body)
		wantStatus(t, res, http.StatusCreated)
		if string(res.body) != string(first.body) {
			t.Fatalf("the retry through another gate differs:\n%.200s\n%.200s", res.body, first.body)
		}
	}
	if n := f.jobs(); n != [3]int{1, 0, 0} {
		t.Fatalf("datacenters hold %v jobs, want 1, 0, 0", n)
	}
}

// TestFedEdgeAltFingerprintsShareOneBuffer: the fingerprints of the lists
// naming each datacenter alone are those of the bodies withDatacenters
// makes, and over a 1 MiB body for three datacenters they copy the body
// once, not once per datacenter.
func TestFedEdgeAltFingerprintsShareOneBuffer(t *testing.T) {
	dcs := []string{"dc1", "dc2", "west-europe-3"}
	big := []byte(`"payload":"` + strings.Repeat("a", 1<<20) + `","type":"x"}`)
	for _, rest := range [][]byte{[]byte(`}`), []byte(`"type":"x"}`), big} {
		alts := altFingerprints("t", rest, dcs)
		for _, dc := range dcs {
			want := fingerprint.Fingerprint("t", http.MethodPost, submitPath, withDatacenters(rest, []string{dc}))
			if alts[dc] != want {
				t.Fatalf("%.20s for %s: %s, want %s", rest, dc, alts[dc], want)
			}
		}
	}
	// The fewest bytes of a few runs: the process's other goroutines
	// (another test's servers winding down) allocate too, not in every run.
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		altFingerprints("t", big, dcs)
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > uint64(len(big))+64<<10 {
		t.Fatalf("%d bytes allocated for a body of %d and %d datacenters, want one copy", least, len(big), len(dcs))
	}
}
