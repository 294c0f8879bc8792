//go:build !race

// The race detector makes sync.Pool drop what it is given, and json.Valid
// takes its scanner from one: counted allocations mean nothing under -race.

package api

import "testing"

// TestJobAppendJSONAllocs holds AppendJSON to its purpose: into a buffer
// large enough, it allocates nothing, with datacenters and an HTML-escaped
// payload.
func TestJobAppendJSONAllocs(t *testing.T) {
	j := benchJob()
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := j.AppendJSON(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendJSON allocated %v times per call; want 0", allocs)
	}
}
