package gate

import (
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// A view without a datacenter that earlier views named (a manager that has
// just restarted and not rejoined the WAN pool) does not make the gate forget
// it: the datacenter stays known with its last addresses, until no view has
// named it for federationForget.
func TestFederationPollerKeepsDatacentersAViewOmits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newFederationPoller(nil, "", nil, slog.New(slog.DiscardHandler))
	p.now = func() time.Time { return now }

	p.store(map[string][]string{"dc1": {"a:1"}, "dc2": {"b:1", "b:2"}})
	now = now.Add(5 * time.Second)
	p.store(map[string][]string{"dc1": {"a:1"}}) // a restarted manager's view
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[a:1] dc2:[b:1 b:2]]" {
		t.Fatalf("after a view without dc2: %s", got)
	}
	now = now.Add(5 * time.Second)
	p.store(map[string][]string{"dc1": {"a:1"}, "dc2": {}}) // dc2 named, its managers down
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[a:1] dc2:[]]" {
		t.Fatalf("dc2 with no alive manager: %s", got)
	}
	now = now.Add(federationForget)
	p.store(map[string][]string{"dc1": {"a:1"}})
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[a:1]]" {
		t.Fatalf("after federationForget: %s", got)
	}
}
