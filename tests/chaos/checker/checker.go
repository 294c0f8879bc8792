// Package checker proves the gate contract's guarantees (docs/api.md,
// "Guarantees") against a recorded history, the way Jepsen's checkers do: after
// the cluster has healed, it reads the cluster back through the public API only
// (GET /v1/jobs with pagination, GET /v1/jobs/{id}, GET
// /v1/idempotency-keys/{key}) and confronts what it finds with what every
// client was told.
//
// The rules, each named in a Violation:
//
//	(a) at most one job exists per (tenant, key), across every job listed;
//	(b) every job answered 201 exists with the id, key, type and payload sent;
//	    for a key no 201 named a job of, every job the cluster shows for it
//	    (made by an indeterminate attempt) or its entry names carries the key,
//	    type and payload sent;
//	(c) every definite answer for a key (201s, their replays, the key's entry)
//	    names the same job id, and no job id is answered for two keys;
//	(d) no key was answered both committed and rejected, unless the rejection's
//	    Retry-After had run out before the commit could have happened;
//	(e) nothing answered 201 was forgotten: the job is in GET /v1/jobs/{id} and
//	    in the list, and the key's entry still says committed; checking one
//	    datacenter, no key is answered 409 idempotency_key_expired ("it
//	    ran") unless it committed or lies more than 1024 sequences below its
//	    client's highest committed one;
//	(f) every 201 for the same job is byte-for-byte the same body, and so
//	    is every rejection replayed while the first rejection's entry may
//	    have lived (same status, same bytes, same Idempotency-Expires-At);
//	    every 201 of a structured key, and its committed entry, name one
//	    expiry; checking one datacenter, at most one 201 of a key says
//	    Idempotent-Replayed: false;
//	(g) no answer falls outside what the contract allows for a well-formed,
//	    authorized request whose key always carries the same body (no 400,
//	    401, 413, 422 idempotency_key_reused, 500; every 201 has a job_id and
//	    an Idempotent-Replayed header; every 429 job_rejected a Retry-After
//	    in seconds; 422 idempotency_key_claimed is allowed for an omitted
//	    list);
//	(h) with several datacenters (CheckFederation): every key with a job in
//	    any datacenter has a final outcome in every datacenter it names, and
//	    every datacenter's job for it has the same id;
//	(i) with workers (CheckWorkers): every job is run to an end — succeeded,
//	    with at least one handler run and no more runs than attempts
//	    (leases: a run beyond them is an attempt run twice) — once the
//	    cluster healed; the runs above one per job (redeliveries) are
//	    counted, not judged;
//	(j) with several datacenters, a key whose submissions omit the
//	    datacenters list (CheckFederationPlaces, Config.Places,
//	    CheckRunPlaces): it is admitted in one datacenter, its home, and in
//	    exactly one once answered; no other datacenter lists or runs its job;
//	(k) with several datacenters, a key whose submissions name some of them:
//	    no other datacenter holds its entry, lists its job or runs it;
//	(l) with workers (CheckWorkers): a job ends by its current lease: no
//	    completion is answered recorded for an attempt other than the job's
//	    last, nor for two attempts of one job, nor for a job that did not
//	    succeed, and a result that names its attempt names the last;
//	(m) with Config.Start, checking one datacenter: no key is answered 409
//	    idempotency_key_expired before an Idempotency-Expires-At it was
//	    answered earlier, less the ledger's clock bound.
//
// Indeterminate requests (transport errors, timeouts, 503s) never cause a
// violation by themselves: such a request may or may not have created its job,
// so a key with no definite answer may have zero or one job, never two.
package checker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/history"
)

// Rule names a checked property. The letter matches the package doc.
type Rule string

// The rules.
const (
	RuleAtMostOneJob    Rule = "a:at-most-one-job"
	RuleJobMatches      Rule = "b:committed-job-matches"
	RuleSameJobID       Rule = "c:same-job-id"
	RuleCommitXorReject Rule = "d:commit-xor-reject"
	RuleNotForgotten    Rule = "e:not-forgotten"
	RuleReplayIdentical Rule = "f:replay-identical"
	RuleExpectedAnswer  Rule = "g:expected-answer"
	RuleEverywhere      Rule = "h:same-job-everywhere"
	RuleRunOnce         Rule = "i:every-job-run-to-an-end"
	RuleOneHome         Rule = "j:omitted-list-one-home"
	RuleOnlyNamed       Rule = "k:only-named-datacenters"
	RuleCurrentLease    Rule = "l:ended-by-current-lease"
	RuleNoEarlyExpiry   Rule = "m:no-early-expiry"
)

// Rules lists every rule in report order.
var Rules = []Rule{RuleAtMostOneJob, RuleJobMatches, RuleSameJobID, RuleCommitXorReject,
	RuleNotForgotten, RuleReplayIdentical, RuleExpectedAnswer, RuleEverywhere, RuleRunOnce, RuleOneHome, RuleOnlyNamed,
	RuleCurrentLease, RuleNoEarlyExpiry}

// Config says how to read the cluster.
type Config struct {
	// GateURL is the base URL of the gate to read through (e.g.
	// http://127.0.0.1:8080). Required by Check.
	GateURL string
	// Tokens maps tenant names to bearer tokens. A tenant absent from the map
	// (such as "default" on a gate without a token file) is read without an
	// Authorization header. Every tenant in Tokens is listed, even one the
	// history does not mention.
	Tokens map[string]string
	// HTTPClient is used for every read; nil builds one.
	HTTPClient *http.Client
	// RequestTimeout bounds one read attempt (default 10s).
	RequestTimeout time.Duration
	// ReadAttempts bounds the attempts of one read that fails transiently
	// (transport error, 5xx, 429); default 8. A read that never succeeds
	// fails Check with an error, never with a violation.
	ReadAttempts int
	// Parallelism bounds concurrent reads (default 8).
	Parallelism int
	// PageSize is the limit of each GET /v1/jobs page (default and maximum
	// api.MaxListLimit).
	PageSize int
	// RequireKeys makes a missing idempotency entry (404) of a key answered 201
	// a violation of rule (e). Set it when the check runs within the cluster's
	// IDEMPOTENCY_COMMITTED_TTL_SECONDS of the run; otherwise entries may have
	// expired legitimately and a 404 is only counted.
	RequireKeys bool
	// Datacenter, when set, reads that datacenter's copy through the gate
	// (?datacenter=, docs/multidc.md): Check then checks one datacenter of a
	// federation.
	Datacenter string
	// Places, with Datacenter, are the placements CheckFederationPlaces
	// found: Check then holds to rules (a)-(g) only the keys whose job
	// belongs in Datacenter (named by their submissions, or the home of an
	// omitted list), and reports a job it lists or fetches there for a key
	// that belongs elsewhere (rule (j) or (k)).
	Places *Places
	// Start is the wall-clock start of the history's monotonic clock
	// (history.Recorder.Start). With it, checking one datacenter, Check
	// holds each 409 idempotency_key_expired to rule (m); without it, (m)
	// is not checked.
	Start time.Time
}

// Violation is one broken rule for one (tenant, key).
type Violation struct {
	Rule   Rule
	Tenant string
	Key    string
	// JobIDs are the jobs involved, sorted.
	JobIDs []string
	// Detail explains what was found.
	Detail string
	// Ops are the history's submit operations for the key, in order.
	Ops []history.Op
}

// String renders the violation with its history lines, one per line.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] tenant=%s key=%s", v.Rule, v.Tenant, v.Key)
	if len(v.JobIDs) > 0 {
		fmt.Fprintf(&b, " jobs=%s", strings.Join(v.JobIDs, ","))
	}
	fmt.Fprintf(&b, ": %s", v.Detail)
	if len(v.Ops) == 0 {
		b.WriteString("\n    (no history lines: the key was never submitted by this history)")
	}
	for _, op := range v.Ops {
		b.WriteString("\n    ")
		b.WriteString(op.String())
	}
	return b.String()
}

// Counts says how much was checked.
type Counts struct {
	// Ops is the number of submit operations in the history.
	Ops int
	// Indeterminate is the number of those without a definite answer.
	Indeterminate int
	// Keys is the number of distinct (tenant, key) submitted.
	Keys int
	// KeysCommitted, KeysRejected and KeysUnresolved split Keys by their
	// definite answers: a 201, a job_rejected, or none (only indeterminate or
	// other answers). A key answered both is counted in both.
	KeysCommitted, KeysRejected, KeysUnresolved int
	// JobsListed is the number of jobs GET /v1/jobs returned, over all
	// tenants and pages.
	JobsListed int
	// JobsFetched is the number of GET /v1/jobs/{id} answered 200, and
	// JobsNotFound the number answered 404.
	JobsFetched, JobsNotFound int
	// KeysFound and KeysNotFound count GET /v1/idempotency-keys/{key} answers.
	KeysFound, KeysNotFound int
}

// Result is the outcome of a check.
type Result struct {
	Checked    Counts
	Violations []Violation
}

// OK reports whether no rule was broken.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// ByRule counts violations per rule.
func (r Result) ByRule() map[Rule]int {
	m := map[Rule]int{}
	for _, v := range r.Violations {
		m[v.Rule]++
	}
	return m
}

// Summary is a human report: the counts, the verdict, and every violation with
// its history lines.
func (r Result) Summary() string {
	c := r.Checked
	var b strings.Builder
	fmt.Fprintf(&b, "checked %d submit ops (%d indeterminate) on %d keys: %d committed, %d rejected, %d unresolved",
		c.Ops, c.Indeterminate, c.Keys, c.KeysCommitted, c.KeysRejected, c.KeysUnresolved)
	fmt.Fprintf(&b, "; cluster: %d jobs listed, %d fetched, %d not found, %d keys found, %d keys not found",
		c.JobsListed, c.JobsFetched, c.JobsNotFound, c.KeysFound, c.KeysNotFound)
	if r.OK() {
		b.WriteString("\nOK: no violations")
		return b.String()
	}
	noun := "violations"
	if len(r.Violations) == 1 {
		noun = "violation"
	}
	fmt.Fprintf(&b, "\nFAILED: %d %s", len(r.Violations), noun)
	by := r.ByRule()
	for _, rule := range Rules {
		if n := by[rule]; n > 0 {
			fmt.Fprintf(&b, "\n  %-26s %d", rule, n)
		}
	}
	for _, v := range r.Violations {
		b.WriteString("\n")
		b.WriteString(v.String())
	}
	return b.String()
}

// Check reads the cluster through cfg.GateURL and checks every rule against
// ops. Run it after the cluster has healed. It returns an error only when the
// cluster cannot be read (or ctx ends); broken guarantees are Violations.
func Check(ctx context.Context, cfg Config, ops []history.Op) (Result, error) {
	r, err := newReader(cfg)
	if err != nil {
		return Result{}, err
	}
	defer r.close()
	all := ops
	var elsewhere map[tk]Placement
	if cfg.Places != nil {
		if cfg.Datacenter == "" {
			return Result{}, errors.New("checker: Config.Places needs Config.Datacenter")
		}
		ops, elsewhere = cfg.Places.opsIn(ops, cfg.Datacenter)
	}
	h := newHistoryIndex(ops)
	cl, err := r.readCluster(ctx, h)
	if err != nil {
		return Result{}, err
	}
	res := evaluate(h, cl, cfg)
	if len(elsewhere) > 0 {
		byKey := map[tk][]history.Op{}
		for _, op := range all {
			if k := (tk{tenantOf(op), op.Key}); op.Kind == history.KindSubmit {
				if _, ok := elsewhere[k]; ok {
					byKey[k] = append(byKey[k], op)
				}
			}
		}
		res.Violations = append(res.Violations, foreignJobs(cfg.Datacenter, elsewhere, cl, byKey)...)
	}
	return res, nil
}

// CheckHistory checks the rules that need no cluster reads — (c), (d), (f) and
// (g) — against the answers recorded in ops alone. It is for re-checking a
// saved history after the cluster is gone.
func CheckHistory(ops []history.Op) Result {
	return evaluate(newHistoryIndex(ops), nil, Config{})
}

// tk identifies a key within a tenant; tid a job within a tenant.
type tk struct{ tenant, key string }
type tid struct{ tenant, id string }

// historyIndex groups the submit ops by (tenant, key).
type historyIndex struct {
	ops   int
	keys  []tk // sorted
	byKey map[tk][]history.Op
}

func tenantOf(op history.Op) string {
	if op.Tenant == "" {
		return api.DefaultTenant
	}
	return op.Tenant
}

func newHistoryIndex(ops []history.Op) *historyIndex {
	sorted := append([]history.Op(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	h := &historyIndex{byKey: map[tk][]history.Op{}}
	for _, op := range sorted {
		if op.Kind != history.KindSubmit || op.Key == "" {
			continue
		}
		h.ops++
		k := tk{tenantOf(op), op.Key}
		if _, ok := h.byKey[k]; !ok {
			h.keys = append(h.keys, k)
		}
		h.byKey[k] = append(h.byKey[k], op)
	}
	sortTK(h.keys)
	return h
}

func sortTK(keys []tk) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].key < keys[j].key
	})
}

// tenants returns every tenant in the history or in tokens, sorted.
func (h *historyIndex) tenants(tokens map[string]string) []string {
	set := map[string]bool{}
	for _, k := range h.keys {
		set[k.tenant] = true
	}
	for t := range tokens {
		set[t] = true
	}
	var out []string
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// answeredIDs returns the distinct job ids of the 201 answers among ops.
func answeredIDs(ops []history.Op) []string {
	seen := map[string]bool{}
	var ids []string
	for _, op := range ops {
		if op.Class() == history.Committed && op.JobID != "" && !seen[op.JobID] {
			seen[op.JobID] = true
			ids = append(ids, op.JobID)
		}
	}
	sort.Strings(ids)
	return ids
}
