package manager

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
)

// ForgetDatacenter stops the outbox carrying anything to datacenter dc, one
// taken out of the federation for good (oncectl outbox forget; Consul's
// force-leave): at the leader, every entry of the ledger, live or owed, that
// names dc and that dc has not confirmed is recorded as confirmed by dc with
// the outbox's Confirm commands, so that the outbox no longer carries it
// there and the entries no other datacenter owes leave its count
// (MANAGER_OUTBOX_MAX_ENTRIES). It returns how many (entry, dc) pairs it
// recorded; a second call finds none. The jobs of those pairs are not
// carried to dc, even if it comes back. Checking that dc is out of the
// federation is the caller's (the daemon's WAN pool). known are the
// datacenters the federation knows (the daemon's federation view): a dc
// that is none of them and that no pair names is refused not_found, naming
// them, since a mistyped name would otherwise forget 0 as a datacenter
// owed nothing does. A failure part way (leadership lost) returns the pairs
// recorded until then with the error; a call at the next leader records
// the rest.
func (m *Manager) ForgetDatacenter(ctx context.Context, dc string, known []string) (int, error) {
	own := m.cfg.Datacenter
	if err := checkDatacenter("datacenter", dc); err != nil {
		return 0, err
	}
	if dc == own {
		return 0, rpc.Errorf(rpc.CodeInvalid, "datacenter %s is this datacenter: only another datacenter's submissions can be forgotten", dc)
	}
	if err := m.CheckLeader(); err != nil {
		return 0, err
	}
	// A job with both a live and an owed entry is one pair: one Confirm
	// clears both copies.
	type job struct{ tenant, key, jobID string }
	seen := map[job]bool{}
	var items []ledger.Confirmation
	visit := func(e ledger.Entry) bool {
		j := job{e.Tenant, e.Key, e.JobID}
		if slices.Contains(e.Request.Datacenters, dc) && !slices.Contains(e.Confirmed, dc) && !seen[j] {
			seen[j] = true
			items = append(items, ledger.Confirmation{Tenant: e.Tenant, Key: e.Key, JobID: e.JobID, Datacenter: dc})
		}
		return true
	}
	m.fsm.ResolvedMultiDatacenter(own, visit)
	m.fsm.OwedMultiDatacenter(visit)
	if len(items) == 0 && !slices.Contains(known, dc) {
		return 0, rpc.Errorf(rpc.CodeNotFound, "datacenter %s is not one the federation knows (%s), and the outbox owes it nothing",
			dc, cmp.Or(strings.Join(slices.Sorted(slices.Values(known)), ", "), "none"))
	}
	left, err := m.confirm(ctx, items)
	n := len(items) - len(left)
	if n > 0 {
		m.log.Warn("forgot another datacenter's multi-datacenter submissions at an operator's request: the outbox no longer carries them there, so their jobs may never run there",
			logging.KeyDatacenter, dc, logging.KeyCount, n)
	}
	return n, err
}
