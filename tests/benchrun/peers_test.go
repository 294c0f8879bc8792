package benchrun

import (
	"bytes"
	"strings"
	"testing"

	"github.com/once-dev/once/tests/loadgen"
)

// TestComparePeers pairs the two runs' workloads by name, divides once's 2xx
// rate by the peer's, and flags a key answered with two job ids on either
// side.
func TestComparePeers(t *testing.T) {
	load := func(name string, ok, answered int64, p99us int64, multi int64) loadgen.Result {
		return loadgen.Result{Name: name, DurationSec: 2, Answered: answered, Status: map[int]int64{201: ok, 503: answered - ok},
			Latency: loadgen.Latency{P99US: p99us}, KeysWithMultipleJobIDs: multi}
	}
	once := Report{Workloads: []WorkloadResult{
		{Load: load(WUniqueC64, 3000, 3000, 20_000, 0), Cluster: ClusterStats{CPUPerRequest: CPUPerRequest{Once: 300}}},
		{Load: load(WDuplicates, 8000, 8010, 9_000, 0)},
	}}
	peer := PeerRun{Workloads: []PeerWorkload{
		{Load: load(WUniqueC64, 2000, 2000, 40_000, 0), MembersUS: 500},
		{Load: load(WDuplicates, 4000, 4000, 10_000, 1)},
		{Load: load(WUniqueC512, 1, 1, 1, 0)}, // once did not run it: no row
	}}
	rows := compareRuns(once, peer)
	if len(rows) != 2 {
		t.Fatalf("rows = %+v, want 2", rows)
	}
	u := rows[0]
	if u.Workload != WUniqueC64 || u.OnceRate != 1500 || u.PeerRate != 1000 || u.RateRatio != 1.5 ||
		u.OnceP99MS != 20 || u.PeerP99MS != 40 || u.OnceCPUUS != 300 || u.PeerCPUUS != 500 || !u.DuplicateOK {
		t.Fatalf("unique row = %+v", u)
	}
	d := rows[1]
	if d.OnceErrors != 10 || d.PeerErrors != 0 || d.DuplicateOK {
		t.Fatalf("duplicates row = %+v, want 10 non-2xx for once and duplicates flagged", d)
	}
	var buf bytes.Buffer
	if err := WritePeersTable(&buf, PeersReport{Once: once, Peer: peer, Rows: rows}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "1.50×") || !strings.Contains(buf.String(), "SOME") {
		t.Fatalf("table:\n%s", buf.String())
	}
}
