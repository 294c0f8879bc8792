package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/history"
)

// Placement is where one key's job belongs in a federation, and where
// CheckFederationPlaces found it.
type Placement struct {
	// Named are the datacenters the key's submissions named (sorted); empty
	// for an omitted list, whose job runs in one datacenter, its home
	// (docs/multidc.md, "An omitted list in a federation").
	Named []string
	// Home is, for an omitted list, the datacenter holding the key's final
	// entry ("" when none does: nothing was admitted, or rule (j) found
	// two).
	Home string
	// Committed are the datacenters whose entry for the key is committed,
	// and JobID the job they name (rule (h) holds them to one).
	Committed []string
	JobID     string
}

// Omitted reports whether the key's submissions left the datacenters out.
func (p Placement) Omitted() bool { return len(p.Named) == 0 }

// belongsIn reports whether the key's job may exist in datacenter dc: one it
// names, or the home of an omitted list.
func (p Placement) belongsIn(dc string) bool {
	if p.Omitted() {
		return p.Home == dc
	}
	return slices.Contains(p.Named, dc)
}

// rule is the rule a job of the key found where it does not belong breaks.
func (p Placement) rule() Rule {
	if p.Omitted() {
		return RuleOneHome
	}
	return RuleOnlyNamed
}

// Places are the placements of every key of a history, as
// CheckFederationPlaces read them. Set Config.Places to check one
// datacenter of a federation whose jobs name different datacenters: Check
// then holds only the keys that belong in Config.Datacenter to rules
// (a)-(g), and reports a job listed there for a key that belongs elsewhere.
type Places struct {
	byKey map[tk]Placement
}

// Of returns the placement of (tenant, key).
func (p *Places) Of(tenant, key string) (Placement, bool) {
	pl, ok := p.byKey[tk{tenant, key}]
	return pl, ok
}

// Len is the number of keys placed.
func (p *Places) Len() int { return len(p.byKey) }

// Homes counts the omitted-list keys by home ("none": no final entry
// anywhere, or several); nil when there are none.
func (p *Places) Homes() map[string]int {
	var n map[string]int
	for _, pl := range p.byKey {
		if !pl.Omitted() {
			continue
		}
		if n == nil {
			n = map[string]int{}
		}
		home := pl.Home
		if home == "" {
			home = "none"
		}
		n[home]++
	}
	return n
}

// opsIn returns the submit ops of the keys that belong in dc, and the keys
// of the history that do not.
func (p *Places) opsIn(ops []history.Op, dc string) (in []history.Op, elsewhere map[tk]Placement) {
	elsewhere = map[tk]Placement{}
	for _, op := range ops {
		if op.Kind != history.KindSubmit || op.Key == "" {
			in = append(in, op)
			continue
		}
		k := tk{tenantOf(op), op.Key}
		pl, ok := p.byKey[k]
		if !ok || pl.belongsIn(dc) {
			in = append(in, op)
			continue
		}
		elsewhere[k] = pl
	}
	return in, elsewhere
}

// namedOf returns the datacenters a key's submissions named, sorted and
// deduplicated (the workload sends one list per key; a key sent with
// several is held to the union).
func namedOf(ops []history.Op) []string {
	var named []string
	for _, op := range ops {
		named = append(named, op.Datacenters...)
	}
	sort.Strings(named)
	return slices.Compact(named)
}

// definitelyAnswered reports whether some op of the key was answered 201 or
// job_rejected: a final entry must then exist in the job's home.
func definitelyAnswered(ops []history.Op) bool {
	for _, op := range ops {
		if c := op.Class(); c == history.Committed || c == history.Rejected {
			return true
		}
	}
	return false
}

// judgeOmitted applies rule (j) to one omitted-list key's entries: a final
// entry (committed or rejected) in at most one datacenter, every other
// holding a claim or nothing, and in exactly one once a submission was
// definitely answered. pending says the violation may still heal (no
// final entry yet). home is the datacenter of the final entry.
func judgeOmitted(k tk, entries []*api.KeyInfo, cfgs []Config, answered bool) (v *Violation, pending bool, home string) {
	var finals, states []string
	var ids []string
	for i, e := range entries {
		dc := cfgs[i].Datacenter
		if e == nil {
			states = append(states, dc+": no entry")
			continue
		}
		s := dc + ": " + e.State
		if e.Home != "" {
			s += " (home " + e.Home + ")"
		}
		states = append(states, s)
		if e.State == api.KeyStateCommitted || e.State == api.KeyStateRejected {
			finals = append(finals, dc)
			if e.JobID != nil {
				ids = append(ids, *e.JobID)
			}
		}
	}
	sort.Strings(ids)
	ids = slices.Compact(ids)
	switch {
	case len(finals) > 1:
		return &Violation{Rule: RuleOneHome, Tenant: k.tenant, Key: k.key, JobIDs: ids,
			Detail: "an omitted datacenters list was admitted in " + strings.Join(finals, ",") +
				", not in one home (" + strings.Join(states, "; ") + ")"}, false, ""
	case len(finals) == 0 && answered:
		return &Violation{Rule: RuleOneHome, Tenant: k.tenant, Key: k.key,
			Detail: "an omitted datacenters list was answered, but no datacenter holds its final entry (" +
				strings.Join(states, "; ") + ")"}, true, ""
	case len(finals) == 1:
		return nil, false, finals[0]
	}
	return nil, false, ""
}

// judgeOnlyNamed applies rule (k) to one named-list key's entries: no
// datacenter the list does not name holds an entry of the key (its gates
// forward to the named datacenters only, its outbox carries to them only).
func judgeOnlyNamed(k tk, entries []*api.KeyInfo, cfgs []Config, named []string) *Violation {
	var extra []string
	var ids []string
	for i, e := range entries {
		dc := cfgs[i].Datacenter
		if e == nil || slices.Contains(named, dc) {
			continue
		}
		extra = append(extra, dc+": "+e.State)
		if e.JobID != nil {
			ids = append(ids, *e.JobID)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(ids)
	return &Violation{Rule: RuleOnlyNamed, Tenant: k.tenant, Key: k.key, JobIDs: slices.Compact(ids),
		Detail: "a job naming " + strings.Join(named, ",") + " has an entry in a datacenter it does not name (" +
			strings.Join(extra, "; ") + ")"}
}

// foreignJobs reports, for one datacenter's Check with Config.Places, every
// job listed or fetched there for a key of the history that belongs in
// other datacenters: rule (j) for an omitted list (a job outside its home),
// rule (k) for a named list.
func foreignJobs(dc string, elsewhere map[tk]Placement, cl *clusterState, byKey map[tk][]history.Op) []Violation {
	found := map[tk][]string{}
	add := func(tenant string, j api.Job) {
		k := tk{tenant, j.IdempotencyKey}
		if _, ok := elsewhere[k]; ok && !slices.Contains(found[k], j.JobID) {
			found[k] = append(found[k], j.JobID)
		}
	}
	for id, j := range cl.listed {
		add(id.tenant, j)
	}
	for id, j := range cl.fetched {
		if j != nil {
			add(id.tenant, *j)
		}
	}
	var out []Violation
	for k, ids := range found {
		pl := elsewhere[k]
		sort.Strings(ids)
		where := "it names " + strings.Join(pl.Named, ",")
		if pl.Omitted() {
			where = "its home is " + pl.Home
			if pl.Home == "" {
				where = "it has no single home (no final entry, or several)"
			}
		}
		out = append(out, Violation{Rule: pl.rule(), Tenant: k.tenant, Key: k.key, JobIDs: ids, Ops: byKey[k],
			Detail: fmt.Sprintf("%s lists job %s of the key, but %s", dc, strings.Join(ids, ","), where)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// CheckRunPlaces checks where the workers ran each key's job: the handler
// runs of runs[i] are those of datacenter dcs[i]'s workers, counted by job
// ID (the same ID in every datacenter). Once rule (i) has waited for every
// job to end, a key's job must have run in exactly the datacenters whose
// entry is committed (each named one that admitted it, or the one home of
// an omitted list) and in no other: rule (j) for an omitted list, rule (k)
// for a named one. ops gives each violation its history lines.
func CheckRunPlaces(places *Places, dcs []string, runs []*Runs, ops []history.Op) Result {
	h := newHistoryIndex(ops)
	var res Result
	for _, k := range h.keys {
		pl, ok := places.byKey[k]
		if !ok || pl.JobID == "" {
			continue
		}
		var ran []string
		for i, dc := range dcs {
			if runs[i].Of(pl.JobID) > 0 {
				ran = append(ran, dc)
			}
		}
		if slices.Equal(ran, pl.Committed) {
			continue
		}
		want := strings.Join(pl.Committed, ",")
		if pl.Omitted() {
			want = "its home " + want
		}
		res.Violations = append(res.Violations, Violation{Rule: pl.rule(), Tenant: k.tenant, Key: k.key,
			JobIDs: []string{pl.JobID}, Ops: h.byKey[k],
			Detail: fmt.Sprintf("job %s ran in [%s], want exactly %s", pl.JobID, strings.Join(ran, ","), want)})
	}
	return res
}
