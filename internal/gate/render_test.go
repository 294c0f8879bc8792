package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// TestJobBody holds the answer's body to what encoding/json gives, plus the
// newline, and to an error (the gate's 500) where encoding/json fails.
func TestJobBody(t *testing.T) {
	pj := &rpcpb.Job{
		JobId: "j_1", Type: "send_invoice", Status: "committed", IdempotencyKey: "k<1>&",
		CreatedAt: "2026-01-02T03:04:05Z", Payload: []byte(`{"a": "<\u2028>", "b" : [1, 2]}`),
		DatacentersSet: true,
		Datacenters: map[string]*rpcpb.DatacenterStatus{
			"dc2": {Status: "rejected", Reason: "quota"}, "dc1": {Status: "committed"},
		},
	}
	for _, j := range []api.Job{apiJob(pj), apiJob(pj).Admission(), apiJob(&rpcpb.Job{})} {
		want, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		got, err := jobBody(j)
		if err != nil {
			t.Fatalf("jobBody(%#v): %v", j, err)
		}
		if want = append(want, '\n'); !bytes.Equal(got, want) {
			t.Fatalf("jobBody(%#v)\n got %q\nwant %q", j, got, want)
		}
	}
	bad := apiJob(&rpcpb.Job{JobId: "j_2", Payload: []byte(`{"a":`)})
	if _, err := json.Marshal(bad); err == nil {
		t.Fatal("json.Marshal accepted an invalid payload")
	}
	if got, err := jobBody(bad); !errors.Is(err, api.ErrInvalidRawJSON) || got != nil {
		t.Fatalf("jobBody of an invalid payload = %q, %v; want nil, an error matching api.ErrInvalidRawJSON", got, err)
	}
}
