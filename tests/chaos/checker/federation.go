package checker

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/history"
)

// CheckFederation checks rules (h), (j) and (k) across the datacenters of
// a federation: CheckFederationPlaces without the placements.
func CheckFederation(ctx context.Context, cfgs []Config, ops []history.Op, wait time.Duration) (Result, error) {
	res, _, err := CheckFederationPlaces(ctx, cfgs, ops, wait)
	return res, err
}

// CheckFederationPlaces checks the rules across the datacenters of a
// federation, one Config per datacenter (Config.Datacenter set, each read
// through one of its gates), and returns where each key's job belongs and
// was found. A key whose submissions name datacenters is held to rule (h):
// if its entry is committed or rejected in any datacenter it names, it must
// be final in every one of them, and the committed ones must name the same
// job; and to rule (k): no datacenter it does not name holds an entry of
// it. A key whose submissions omit the list is held to rule (j): its entry
// is final in at most one datacenter, its home (the others hold claims),
// and in exactly one once a submission was answered 201 or job_rejected.
// The outbox completes a datacenter some time after the faults healed, so
// a key that is final somewhere and missing or pending where it must be
// final is read again until wait has passed; only then is it a violation.
// Two different job ids, two homes or an entry outside the named
// datacenters never heal and are reported at once. A key that belongs in
// no datacenter (an omitted list with no single home) is also held here to
// the rules that need only its answers, (c), (d), (f) and (g). Run the
// per-datacenter Check (with Config.Places) for the other rules.
func CheckFederationPlaces(ctx context.Context, cfgs []Config, ops []history.Op, wait time.Duration) (Result, *Places, error) {
	h := newHistoryIndex(ops)
	res := Result{Checked: Counts{Ops: h.ops, Keys: len(h.keys)}}
	places := &Places{byKey: make(map[tk]Placement, len(h.keys))}
	readers := make([]*reader, len(cfgs))
	for i, cfg := range cfgs {
		if cfg.Datacenter == "" {
			return res, nil, fmt.Errorf("checker: CheckFederation needs Config.Datacenter (config %d)", i)
		}
		r, err := newReader(cfg)
		if err != nil {
			return res, nil, err
		}
		defer r.close()
		readers[i] = r
	}
	open := h.keys
	deadline := time.Now().Add(wait)
	for {
		entries, err := readEntries(ctx, readers, open)
		if err != nil {
			return res, nil, err
		}
		var still []tk
		final := time.Now().After(deadline)
		for _, k := range open {
			pl := Placement{Named: namedOf(h.byKey[k])}
			var v *Violation
			var pending bool
			if pl.Omitted() {
				v, pending, pl.Home = judgeOmitted(k, entries[k], cfgs, definitelyAnswered(h.byKey[k]))
			} else {
				v = judgeOnlyNamed(k, entries[k], cfgs, pl.Named)
				if v == nil {
					v, pending = judgeEverywhere(k, named(entries[k], cfgs, pl.Named))
				}
			}
			if v != nil {
				if pending && !final {
					still = append(still, k)
					continue
				}
				v.Ops = h.byKey[k]
				res.Violations = append(res.Violations, *v)
			}
			for i, e := range entries[k] {
				if e != nil && e.State == api.KeyStateCommitted && e.JobID != nil {
					pl.Committed = append(pl.Committed, cfgs[i].Datacenter)
					pl.JobID = *e.JobID
				}
			}
			places.byKey[k] = pl
		}
		if len(still) == 0 {
			break
		}
		open = still
		select {
		case <-ctx.Done():
			return res, nil, fmt.Errorf("%w: %w", ErrRead, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	// A key that belongs in no datacenter (an omitted list with no single
	// home) is held to rules (a)-(g) by no datacenter's Check: hold it
	// here to those that need only its answers, (c), (d), (f) and (g).
	var homeless []history.Op
	for _, k := range h.keys {
		if pl := places.byKey[k]; pl.Omitted() && pl.Home == "" {
			homeless = append(homeless, h.byKey[k]...)
		}
	}
	if len(homeless) > 0 {
		res.Violations = append(res.Violations, CheckHistory(homeless).Violations...)
	}
	sort.SliceStable(res.Violations, func(i, j int) bool {
		a, b := res.Violations[i], res.Violations[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.Key < b.Key
	})
	return res, places, nil
}

// dcEntry is one datacenter's entry of a key (nil: none).
type dcEntry struct {
	dc    string
	entry *api.KeyInfo
}

// named returns the entries of the datacenters a key names, in cfgs' order.
func named(entries []*api.KeyInfo, cfgs []Config, names []string) []dcEntry {
	var out []dcEntry
	for i, e := range entries {
		if slices.Contains(names, cfgs[i].Datacenter) {
			out = append(out, dcEntry{cfgs[i].Datacenter, e})
		}
	}
	return out
}

// readEntries reads every key's entry in every datacenter: entries[k][i] is
// datacenter i's (nil: no entry).
func readEntries(ctx context.Context, readers []*reader, keys []tk) (map[tk][]*api.KeyInfo, error) {
	out := make(map[tk][]*api.KeyInfo, len(keys))
	for _, k := range keys {
		out[k] = make([]*api.KeyInfo, len(readers))
	}
	var mu sync.Mutex
	for i, r := range readers {
		err := parallel(ctx, r.cfg.Parallelism, keys, func(ctx context.Context, k tk) error {
			var info api.KeyInfo
			found, err := r.get(ctx, k.tenant, "/v1/idempotency-keys/"+url.PathEscape(k.key), &info, api.CodeIdempotencyKeyNotFound)
			if err != nil {
				return err
			}
			if found {
				mu.Lock()
				out[k][i] = &info
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// judgeEverywhere applies rule (h) to one key's entries in the datacenters
// it names. pending says the violation may still heal (a datacenter has no
// final outcome yet).
func judgeEverywhere(k tk, entries []dcEntry) (v *Violation, pending bool) {
	final := func(e *api.KeyInfo) bool {
		return e != nil && (e.State == api.KeyStateCommitted || e.State == api.KeyStateRejected)
	}
	var anyFinal bool
	ids := map[string][]string{} // job id → datacenters holding it
	var missing, states []string
	for _, de := range entries {
		dc, e := de.dc, de.entry
		switch {
		case e == nil:
			states = append(states, dc+": no entry")
		default:
			states = append(states, dc+": "+e.State)
		}
		if final(e) {
			anyFinal = true
		} else {
			missing = append(missing, dc)
		}
		if e != nil && e.State == api.KeyStateCommitted && e.JobID != nil {
			ids[*e.JobID] = append(ids[*e.JobID], dc)
		}
	}
	if len(ids) > 1 {
		var parts, jobIDs []string
		for id, dcs := range ids {
			jobIDs = append(jobIDs, id)
			parts = append(parts, id+" in "+strings.Join(dcs, ","))
		}
		sort.Strings(jobIDs)
		sort.Strings(parts)
		return &Violation{Rule: RuleEverywhere, Tenant: k.tenant, Key: k.key, JobIDs: jobIDs,
			Detail: "the datacenters hold different jobs for the key: " + strings.Join(parts, "; ")}, false
	}
	if anyFinal && len(missing) > 0 {
		var jobIDs []string
		for id := range ids {
			jobIDs = append(jobIDs, id)
		}
		return &Violation{Rule: RuleEverywhere, Tenant: k.tenant, Key: k.key, JobIDs: jobIDs,
			Detail: "final in some datacenters, not in " + strings.Join(missing, ",") + " (" + strings.Join(states, "; ") + ")"}, true
	}
	return nil, false
}
