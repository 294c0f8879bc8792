package manager

import (
	"slices"
	"testing"

	"github.com/once-dev/once/internal/ledger"
)

// A read names the datacenters of a job whose submission named more than
// one (sorted, each once; the ledger's sorted set is shared, anything else
// copied and the job left as it was), and nothing for a job of one.
func TestNamedDatacenters(t *testing.T) {
	m := &Manager{cfg: Config{Datacenter: "dc2"}}
	for _, c := range []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{"dc1"}, nil},
		{[]string{"dc1", "dc1"}, nil},
		{[]string{"dc1", "dc2"}, []string{"dc1", "dc2"}},
		{[]string{"dc3", "dc1", "dc2", "dc1"}, []string{"dc1", "dc2", "dc3"}},
	} {
		in := slices.Clone(c.in)
		j := m.pbJobRead(ledger.Job{ID: "j", Datacenters: in, Life: &ledger.JobLife{State: ledger.JobQueued}})
		if !slices.Equal(j.NamedDatacenters, c.want) || (c.want == nil) != (j.NamedDatacenters == nil) {
			t.Errorf("%q: named %q, want %q", c.in, j.NamedDatacenters, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("%q: the job's datacenters became %q", c.in, in)
		}
		if len(j.Datacenters) != 1 || j.Datacenters["dc2"].Status == "" {
			t.Errorf("%q: datacenters %v, want this datacenter's alone", c.in, j.Datacenters)
		}
		if a := m.pbJob(ledger.Job{ID: "j", Datacenters: in}); a.NamedDatacenters != nil {
			t.Errorf("%q: the admission answer names %q", c.in, a.NamedDatacenters)
		}
	}
	sorted := []string{"dc1", "dc2"}
	if j := m.pbJobRead(ledger.Job{Datacenters: sorted}); &j.NamedDatacenters[0] != &sorted[0] {
		t.Error("the ledger's sorted set was copied")
	}
}
