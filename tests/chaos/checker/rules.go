package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/history"
)

// never is a time after every history.
const never = time.Duration(math.MaxInt64)

// evaluate applies the rules. cl is nil for a history-only check: then the
// rules that need the cluster, (a), (b) and (e), are skipped, and (c) and (d)
// use the recorded answers alone.
func evaluate(h *historyIndex, cl *clusterState, cfg Config) Result {
	var res Result
	c := &res.Checked
	c.Ops = h.ops
	c.Keys = len(h.keys)

	// existing[k] is every job the cluster shows for key k: listed jobs and
	// fetched jobs, grouped by their own idempotency_key.
	existing := map[tk]map[string][]string{}
	var clusterKeys []tk
	if cl != nil {
		add := func(tenant string, j api.Job, where string) {
			if j.IdempotencyKey == "" {
				return
			}
			k := tk{tenant, j.IdempotencyKey}
			if existing[k] == nil {
				existing[k] = map[string][]string{}
				if _, inHistory := h.byKey[k]; !inHistory {
					clusterKeys = append(clusterKeys, k)
				}
			}
			existing[k][j.JobID] = append(existing[k][j.JobID], where)
		}
		c.JobsListed = len(cl.listed)
		for _, id := range sortedTIDs(cl.listed) {
			add(id.tenant, cl.listed[id], "listed")
		}
		for _, id := range sortedTIDs(cl.fetched) {
			if j := cl.fetched[id]; j != nil {
				c.JobsFetched++
				add(id.tenant, *j, "fetched")
			} else {
				c.JobsNotFound++
			}
		}
		for _, info := range cl.keys {
			if info != nil {
				c.KeysFound++
			} else {
				c.KeysNotFound++
			}
		}
	}

	report := func(rule Rule, k tk, ids []string, detail string) {
		res.Violations = append(res.Violations, Violation{
			Rule: rule, Tenant: k.tenant, Key: k.key, JobIDs: ids, Detail: detail, Ops: h.byKey[k],
		})
	}

	// With one datacenter's cluster read, every key's commit evidence, and
	// each client's highest sequence that committed (for the late-retry
	// window of idempotency_key_expired).
	var ran map[tk]bool
	var highest map[clientNonce]uint64
	if cl != nil && cfg.Datacenter == "" {
		ran = map[tk]bool{}
		highest = map[clientNonce]uint64{}
		for _, k := range h.keys {
			if !keyCommitted(h.byKey[k], existing[k], cl.keys[k]) {
				continue
			}
			ran[k] = true
			if cn, seq, ok := clientOf(k, h.byKey[k]); ok {
				highest[cn] = max(highest[cn], seq)
			}
		}
	}

	for _, k := range h.keys {
		ops := h.byKey[k]
		var committed, rejected []history.Op
		indeterminate := 0
		for _, op := range ops {
			switch op.Class() {
			case history.Committed:
				committed = append(committed, op)
			case history.Rejected:
				rejected = append(rejected, op)
			case history.Indeterminate:
				indeterminate++
			}
		}
		c.Indeterminate += indeterminate
		switch {
		case len(committed) > 0 && len(rejected) > 0:
			c.KeysCommitted++
			c.KeysRejected++
		case len(committed) > 0:
			c.KeysCommitted++
		case len(rejected) > 0:
			c.KeysRejected++
		default:
			c.KeysUnresolved++
		}

		var entry *api.KeyInfo
		entryRead := false
		if cl != nil {
			entry, entryRead = cl.keys[k]
		}
		entryJob := ""
		if entry != nil && entry.State == api.KeyStateCommitted && entry.JobID != nil {
			entryJob = *entry.JobID
		}

		if cl != nil {
			checkAtMostOne(k, existing[k], report)
			checkJobMatches(k, jobsOfKey(ops, committed, existing[k], entryJob), cl, report)
		}
		checkSameJobID(k, committed, entryJob, report)
		commitSeen := len(committed) > 0 || len(existing[k]) > 0 || entryJob != ""
		checkCommitXorReject(k, committed, rejected, indeterminate > 0, commitSeen, report)
		if cl != nil {
			checkNotForgotten(k, committed, entry, entryRead, entryJob, cl, cfg.RequireKeys, report)
		}
		if ran != nil && !ran[k] {
			checkExpiredRan(k, ops, highest, report)
		}
		checkReplayIdentical(k, committed, rejected, cl != nil && cfg.Datacenter == "", report)
		var ownEntry *api.KeyInfo
		if cfg.Datacenter == "" {
			ownEntry = entry
		}
		checkSameExpiry(k, committed, ownEntry, report)
		checkExpectedAnswers(k, ops, report)
		if !cfg.Start.IsZero() && cfg.Datacenter == "" {
			checkExpiredNotEarly(k, ops, cfg.Start, report)
		}
	}

	checkOneKeyPerJob(h, report)

	// Keys that only the cluster knows (submitted by nobody in this history)
	// still get at most one job.
	sortTK(clusterKeys)
	for _, k := range clusterKeys {
		checkAtMostOne(k, existing[k], report)
	}

	order := map[Rule]int{}
	for i, r := range Rules {
		order[r] = i
	}
	sort.SliceStable(res.Violations, func(i, j int) bool {
		a, b := res.Violations[i], res.Violations[j]
		if a.Rule != b.Rule {
			return order[a.Rule] < order[b.Rule]
		}
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.Key < b.Key
	})
	return res
}

type reportFunc func(rule Rule, k tk, ids []string, detail string)

// (a) At most one job exists for the key.
func checkAtMostOne(k tk, jobs map[string][]string, report reportFunc) {
	if len(jobs) <= 1 {
		return
	}
	ids := sortedKeys(jobs)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s (%s)", id, strings.Join(dedupe(jobs[id]), ", "))
	}
	report(RuleAtMostOneJob, k, ids, fmt.Sprintf("%d jobs exist for one key: %s", len(ids), strings.Join(parts, "; ")))
}

// jobCopy is a job as one read endpoint showed it.
type jobCopy struct {
	where string
	job   api.Job
}

// jobsOfKey returns, for rule (b), the 201 answers of a key or, when none
// names a job, one stand-in answer per job the cluster shows for the key:
// its jobs grouped by idempotency_key and the job its committed entry names.
// The stand-in carries the body of the key's first submission (the workload
// sends a key always with the same body), so a job created by an
// indeterminate attempt is held to what was sent too.
func jobsOfKey(ops, committed []history.Op, jobs map[string][]string, entryJob string) []history.Op {
	if len(ops) == 0 || len(answeredIDs(committed)) > 0 {
		// Another job beside an answered one is (a)'s or (c)'s business.
		return committed
	}
	ids := sortedKeys(jobs)
	if entryJob != "" && jobs[entryJob] == nil {
		ids = append(ids, entryJob)
	}
	out := append([]history.Op(nil), committed...)
	for _, id := range ids {
		stand := ops[0]
		stand.JobID = id
		out = append(out, stand)
	}
	return out
}

// (b) Every job answered 201 exists with the id, key, type and payload sent,
// and so does every other job the cluster shows for the key (created by an
// indeterminate attempt) or its entry names. A job that cannot be found at
// all is rule (e)'s business.
func checkJobMatches(k tk, committed []history.Op, cl *clusterState, report reportFunc) {
	var problems []string
	var bad []string
	done := map[string]bool{}
	for _, op := range committed {
		if op.JobID == "" {
			continue
		}
		sent := canonicalOrRaw(op.Payload)
		sig := op.JobID + "\x00" + op.Type + "\x00" + sent
		if done[sig] {
			continue
		}
		done[sig] = true
		id := tid{k.tenant, op.JobID}
		var copies []jobCopy
		if j := cl.fetched[id]; j != nil {
			copies = append(copies, jobCopy{"GET /v1/jobs/" + op.JobID, *j})
		}
		if j, ok := cl.listed[id]; ok {
			copies = append(copies, jobCopy{"GET /v1/jobs (list)", j})
		}
		before := len(problems)
		for _, cp := range copies {
			j := cp.job
			if j.JobID != op.JobID {
				problems = append(problems, fmt.Sprintf("%s shows job_id %q", cp.where, j.JobID))
			}
			if j.IdempotencyKey != k.key {
				problems = append(problems, fmt.Sprintf("%s: idempotency_key is %q, not the key sent", cp.where, j.IdempotencyKey))
			}
			if j.Type != op.Type {
				problems = append(problems, fmt.Sprintf("%s: type is %q, sent %q", cp.where, j.Type, op.Type))
			}
			if got := canonicalOrRaw(j.Payload); got != sent {
				problems = append(problems, fmt.Sprintf("%s: payload is %s, sent %s", cp.where, got, sent))
			}
		}
		if len(problems) > before {
			bad = append(bad, op.JobID)
		}
	}
	if len(problems) > 0 {
		report(RuleJobMatches, k, dedupe(bad), "the committed job is not what was submitted: "+strings.Join(problems, "; "))
	}
}

// (c) Every definite answer names the same job: the 201s (originals and
// replays) and the key's committed entry.
func checkSameJobID(k tk, committed []history.Op, entryJob string, report reportFunc) {
	named := map[string][]string{}
	for _, op := range committed {
		if op.JobID != "" {
			named[op.JobID] = append(named[op.JobID], fmt.Sprintf("op %d", op.Index))
		}
	}
	if entryJob != "" {
		named[entryJob] = append(named[entryJob], "the key's idempotency entry")
	}
	if len(named) <= 1 {
		return
	}
	ids := sortedKeys(named)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s by %s", id, strings.Join(named[id], ", "))
	}
	report(RuleSameJobID, k, ids, "answers name different jobs: "+strings.Join(parts, "; "))
}

// (c) A job id belongs to one key: a job id answered 201 for two keys of a
// tenant is one key's answer delivered to another (the id is derived from
// tenant, key and request). Caught from the history alone; with the cluster,
// rule (b) also finds the job's own key differing from one of them.
func checkOneKeyPerJob(h *historyIndex, report reportFunc) {
	keysOf := map[tid][]string{}
	for _, k := range h.keys {
		for _, id := range answeredIDs(h.byKey[k]) {
			t := tid{k.tenant, id}
			keysOf[t] = append(keysOf[t], k.key)
		}
	}
	for _, t := range sortedTIDs(keysOf) {
		keys := keysOf[t]
		if len(keys) < 2 {
			continue
		}
		for _, key := range keys {
			report(RuleSameJobID, tk{t.tenant, key}, []string{t.id}, fmt.Sprintf(
				"job %s was answered 201 for %d keys: %s", t.id, len(keys), strings.Join(keys, ", ")))
		}
	}
}

// (d) No key is both committed and rejected. A rejected entry expires after its
// Retry-After, and a later submission is judged afresh; so a commit is allowed
// when it may have happened after every rejection's entry expired. Without a
// Retry-After (a validation rejection) the rejection is final.
func checkCommitXorReject(k tk, committed, rejected []history.Op, anyIndeterminate, commitSeen bool, report reportFunc) {
	if len(rejected) == 0 || !commitSeen {
		return
	}
	// expiry is the earliest the last rejection's entry may have expired.
	expiry := time.Duration(0)
	for _, r := range rejected {
		expiry = max(expiry, rejectionExpiry(r))
	}
	ok := false
	if len(committed) > 0 {
		// The commit happened no later than the first 201 completed.
		commitBy := never
		for _, op := range committed {
			commitBy = min(commitBy, op.Complete)
		}
		ok = expiry != never && commitBy > expiry
	} else {
		// Only the cluster shows the commit: an indeterminate attempt may have
		// made it at any time after it was sent.
		ok = expiry != never && anyIndeterminate
	}
	if ok {
		return
	}
	var ids []string
	for _, op := range committed {
		ids = append(ids, op.JobID)
	}
	how := "the cluster holds a job or a committed entry for it"
	if len(committed) > 0 {
		how = fmt.Sprintf("answered 201 by op %d", committed[0].Index)
	}
	report(RuleCommitXorReject, k, dedupe(ids), fmt.Sprintf(
		"the key was answered rejected (op %d: %d %s) and committed (%s), and the rejection cannot have expired first",
		rejected[0].Index, rejected[0].Status, rejected[0].Code, how))
}

// rejectionExpiry is the earliest the entry behind rejection r may have
// expired: invoke + Retry-After − 1s (Retry-After is rounded up), never
// without a Retry-After (a validation rejection is final), at once for a
// Retry-After that is not a number of seconds (lenient).
func rejectionExpiry(r history.Op) time.Duration {
	if r.RetryAfter == "" {
		return never
	}
	if secs, err := strconv.ParseInt(strings.TrimSpace(r.RetryAfter), 10, 64); err == nil && secs > 0 {
		return r.Invoke + time.Duration(secs-1)*time.Second
	}
	return r.Invoke
}

// (e) Nothing answered 201 is forgotten: the job is in GET /v1/jobs/{id} and in
// the list, and the key's entry (while it lives) still says committed. A
// committed entry that names a job the cluster cannot show is forgotten too.
func checkNotForgotten(k tk, committed []history.Op, entry *api.KeyInfo, entryRead bool, entryJob string,
	cl *clusterState, requireKeys bool, report reportFunc) {
	var problems []string
	var ids []string
	for _, id := range answeredIDs(committed) {
		t := tid{k.tenant, id}
		_, inList := cl.listed[t]
		inGet := cl.fetched[t] != nil
		switch {
		case !inList && !inGet:
			problems = append(problems, fmt.Sprintf("job %s was answered 201 but is gone: GET /v1/jobs/%s is 404 and the list lacks it", id, id))
		case !inList:
			problems = append(problems, fmt.Sprintf("job %s was answered 201 but the list lacks it (GET /v1/jobs/%s finds it)", id, id))
		case !inGet:
			problems = append(problems, fmt.Sprintf("job %s was answered 201 and is listed, but GET /v1/jobs/%s is 404", id, id))
		default:
			continue
		}
		ids = append(ids, id)
	}
	if len(committed) > 0 && entryRead {
		switch {
		case entry == nil && requireKeys:
			problems = append(problems, "the key was answered 201 but its idempotency entry is gone (404)")
		case entry != nil && entry.State != api.KeyStateCommitted:
			problems = append(problems, fmt.Sprintf("the key was answered 201 but its idempotency entry is %q", entry.State))
		}
	}
	if entry != nil && entry.State == api.KeyStateCommitted && entryJob == "" {
		problems = append(problems, "the key's entry is committed but names no job")
	}
	if entryJob != "" {
		t := tid{k.tenant, entryJob}
		if _, inList := cl.listed[t]; !inList && cl.fetched[t] == nil {
			problems = append(problems, fmt.Sprintf("the key's entry is committed to job %s, which neither GET nor the list shows", entryJob))
			ids = append(ids, entryJob)
		}
	}
	if len(problems) > 0 {
		sort.Strings(ids)
		report(RuleNotForgotten, k, dedupe(ids), strings.Join(problems, "; "))
	}
}

// clientNonce is one client run's keys: the watermark the ledger keeps per
// tenant, client and nonce.
type clientNonce struct{ tenant, client, nonce string }

// expiredWindow is how many sequences below a client's highest committed one
// the ledger still knows which committed (docs/api.md, "Late retries of
// structured keys").
const expiredWindow = 1024

// clientOf splits a structured key of the history into its client run and
// sequence; ok is false for an opaque key.
func clientOf(k tk, ops []history.Op) (cn clientNonce, seq uint64, ok bool) {
	i := strings.LastIndexByte(k.key, ':')
	if i < 0 || len(ops) == 0 || ops[0].Seq == 0 {
		return cn, 0, false
	}
	rest := k.key[:i]
	j := strings.LastIndexByte(rest, ':')
	if j < 0 {
		return cn, 0, false
	}
	seq, err := strconv.ParseUint(rest[j+1:], 10, 64)
	if err != nil || seq != ops[0].Seq {
		return cn, 0, false
	}
	return clientNonce{k.tenant, rest[:j], k.key[i+1:]}, seq, true
}

// keyCommitted reports whether anything shows the key committed: a 201, a
// job of the key, or a committed entry.
func keyCommitted(ops []history.Op, jobs map[string][]string, entry *api.KeyInfo) bool {
	if len(jobs) > 0 || (entry != nil && entry.State == api.KeyStateCommitted) {
		return true
	}
	for _, op := range ops {
		if op.Class() == history.Committed {
			return true
		}
	}
	return false
}

// (e) A 409 idempotency_key_expired tells the client its job ran and is not
// run again. Checking one datacenter, it is allowed only for a key that
// committed, or one more than 1024 sequences below its client's highest
// committed sequence (the ledger no longer knows). A key with no commit
// anywhere answered expired was told it ran when nothing did: the
// submission is lost. Keys naming datacenters are left to the federation's
// rules (another datacenter may hold the commit).
func checkExpiredRan(k tk, ops []history.Op, highest map[clientNonce]uint64, report reportFunc) {
	var bad []string
	for _, op := range ops {
		if len(op.Datacenters) > 0 {
			return
		}
		if op.Done && op.Err == "" && op.Status == http.StatusConflict && op.Code == string(api.CodeIdempotencyKeyExpired) {
			bad = append(bad, fmt.Sprintf("op %d", op.Index))
		}
	}
	if len(bad) == 0 {
		return
	}
	if cn, seq, ok := clientOf(k, ops); !ok || seq+expiredWindow < highest[cn] {
		return
	}
	report(RuleNotForgotten, k, nil, fmt.Sprintf(
		"%s answered idempotency_key_expired (the job ran), but no job, committed entry or 201 of the key exists, and its sequence is within %d of the client's highest committed one",
		strings.Join(bad, ", "), expiredWindow))
}

// expirySkew is how much earlier than an entry's Idempotency-Expires-At its
// key may be answered 409 idempotency_key_expired: no stamp of ledger time
// runs more than MANAGER_MAX_CLOCK_OFFSET (500ms by default) ahead of real
// time (docs/ledger.md, "Why nothing expires early"); as much again covers
// the history's own wall clock and the header's milliseconds.
const expirySkew = time.Second

// (m) A key is answered 409 idempotency_key_expired only once it has no
// live entry: the ledger answers a live entry first. An answer that carried
// Idempotency-Expires-At E, completed before the 409 was sent, shows an
// entry that lives until E; a 409 completed (start + its offset) before E
// less expirySkew expired that entry early. Keys naming datacenters are
// left out: their answers merge several ledgers'.
func checkExpiredNotEarly(k tk, ops []history.Op, start time.Time, report reportFunc) {
	var parts []string
	for _, x := range ops {
		if len(x.Datacenters) > 0 {
			return
		}
		if !x.Done || x.Err != "" || x.Status != http.StatusConflict || x.Code != string(api.CodeIdempotencyKeyExpired) {
			continue
		}
		by := start.Add(x.Complete)
		for _, y := range ops {
			if !y.Done || y.ExpiresAt == "" || y.Complete > x.Invoke {
				continue
			}
			exp, err := time.Parse(time.RFC3339Nano, y.ExpiresAt)
			if err != nil || !by.Before(exp.Add(-expirySkew)) {
				continue
			}
			parts = append(parts, fmt.Sprintf("op %d was answered idempotency_key_expired by %s, %v before op %d's Idempotency-Expires-At %s",
				x.Index, by.UTC().Format(time.RFC3339Nano), exp.Sub(by).Round(time.Millisecond), y.Index, y.ExpiresAt))
			break
		}
	}
	if len(parts) > 0 {
		report(RuleNoEarlyExpiry, k, nil, fmt.Sprintf("the key's entry expired early (allowing %v of clock skew): %s",
			expirySkew, strings.Join(parts, "; ")))
	}
}

// (f) Every 201 for the same job carries byte-for-byte the same body. So
// does every rejection answered while the first one's entry may still live
// (a replay of a REJECTED entry is its status and bytes; only after the entry
// expired is the key judged afresh). With oneLedger (one datacenter, whose
// ledger alone admits), at most one 201 of the key says Idempotent-Replayed:
// false: a second original means the ledger admitted the key twice.
func checkReplayIdentical(k tk, committed, rejected []history.Op, oneLedger bool, report reportFunc) {
	hashes := map[string]map[string][]string{}
	for _, op := range committed {
		if op.JobID == "" || op.BodyHash == "" {
			continue
		}
		if hashes[op.JobID] == nil {
			hashes[op.JobID] = map[string][]string{}
		}
		hashes[op.JobID][op.BodyHash] = append(hashes[op.JobID][op.BodyHash], fmt.Sprintf("op %d", op.Index))
	}
	var bad, parts []string
	for _, id := range sortedKeys(hashes) {
		if len(hashes[id]) <= 1 {
			continue
		}
		bad = append(bad, id)
		for _, hsh := range sortedKeys(hashes[id]) {
			parts = append(parts, fmt.Sprintf("%s: body %.12s by %s", id, hsh, strings.Join(hashes[id][hsh], ", ")))
		}
	}
	if len(bad) > 0 {
		report(RuleReplayIdentical, k, bad, "201 answers for the same job differ in their bytes: "+strings.Join(parts, "; "))
	}
	if why := rejectionReplaysDiffer(rejected); why != "" {
		report(RuleReplayIdentical, k, nil, why)
	}
	if oneLedger {
		var originals []string
		var ids []string
		for _, op := range committed {
			if op.Replayed == "false" && op.JobID != "" { // a 201 without a job_id is (g)'s
				originals = append(originals, fmt.Sprintf("op %d", op.Index))
				ids = append(ids, op.JobID)
			}
		}
		if len(originals) > 1 {
			sort.Strings(ids)
			report(RuleReplayIdentical, k, dedupe(ids), "the key was admitted more than once: "+
				strings.Join(originals, ", ")+" all say Idempotent-Replayed: false")
		}
	}
}

// sameInstant reports whether two Idempotency-Expires-At values (or
// expires_at members) name the same instant; an absent one (not recorded)
// matches anything.
func sameInstant(a, b string) bool {
	if a == "" || b == "" || a == b {
		return true
	}
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	return errA == nil && errB == nil && ta.Equal(tb)
}

// (f) Every 201 of a structured key carries the Idempotency-Expires-At the
// ledger recorded at its first admission, and so does the key's committed
// entry (one datacenter's: entry is nil in a federation, where each
// datacenter's ledger records its own). A structured key's committed entry
// is never admitted again (after it expires, a retry is 409
// idempotency_key_expired), so a second expiry is a second admission. Opaque
// keys are judged afresh once their entry expired (a new expiry, the same
// job), and keys naming several datacenters merge several ledgers' answers:
// both are skipped.
func checkSameExpiry(k tk, committed []history.Op, entry *api.KeyInfo, report reportFunc) {
	var first *history.Op
	var parts []string
	for i, op := range committed {
		if op.Seq == 0 || len(op.Datacenters) > 1 {
			return
		}
		if op.ExpiresAt == "" {
			continue
		}
		if first == nil {
			first = &committed[i]
			continue
		}
		if !sameInstant(op.ExpiresAt, first.ExpiresAt) {
			parts = append(parts, fmt.Sprintf("op %d says %s, op %d %s", first.Index, first.ExpiresAt, op.Index, op.ExpiresAt))
		}
	}
	if first == nil {
		return
	}
	if entry != nil && entry.State == api.KeyStateCommitted && !sameInstant(entry.ExpiresAt, first.ExpiresAt) {
		parts = append(parts, fmt.Sprintf("op %d says %s, the key's committed entry expires_at %s", first.Index, first.ExpiresAt, entry.ExpiresAt))
	}
	if len(parts) > 0 {
		report(RuleReplayIdentical, k, answeredIDs(committed),
			"the key's 201 answers do not carry one Idempotency-Expires-At (a committed key admitted again?): "+strings.Join(parts, "; "))
	}
}

// rejectionReplaysDiffer compares each rejection with the later ones sent
// while its entry may still have lived: they are its replays, so they carry
// its status and bytes. Keys naming several datacenters are skipped: their
// rejection reports every datacenter's outcome at the time of the answer.
func rejectionReplaysDiffer(rejected []history.Op) string {
	var parts []string
	for i, first := range rejected {
		if len(first.Datacenters) > 1 || first.BodyHash == "" {
			continue
		}
		expiry := rejectionExpiry(first)
		for _, later := range rejected[i+1:] {
			if later.Invoke <= first.Invoke || later.Invoke >= expiry || later.BodyHash == "" {
				continue
			}
			if later.Status != first.Status || later.BodyHash != first.BodyHash {
				parts = append(parts, fmt.Sprintf("op %d answered %d body %.12s while op %d's rejection (%d body %.12s) lived",
					later.Index, later.Status, later.BodyHash, first.Index, first.Status, first.BodyHash))
			} else if !sameInstant(later.ExpiresAt, first.ExpiresAt) {
				parts = append(parts, fmt.Sprintf("op %d says Idempotency-Expires-At %s while op %d's rejection (expiring %s) lived",
					later.Index, later.ExpiresAt, first.Index, first.ExpiresAt))
			}
		}
		if len(parts) > 0 {
			break
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "a rejection's replays differ from it: " + strings.Join(parts, "; ")
}

// (g) Every answer is one the contract allows for a well-formed, authorized
// request whose key is only ever sent with one body.
func checkExpectedAnswers(k tk, ops []history.Op, report reportFunc) {
	var parts []string
	for _, op := range ops {
		if why := unexpected(op); why != "" {
			parts = append(parts, fmt.Sprintf("op %d: %s", op.Index, why))
		}
	}
	if len(parts) > 0 {
		report(RuleExpectedAnswer, k, nil, "answers outside the contract: "+strings.Join(parts, "; "))
	}
}

func unexpected(op history.Op) string {
	if !op.Done || op.Err != "" || op.Status == 0 {
		return ""
	}
	switch op.Class() {
	case history.Committed:
		if op.JobID == "" {
			return "201 without a job_id"
		}
		if op.Replayed != "true" && op.Replayed != "false" {
			return fmt.Sprintf("201 with Idempotent-Replayed %q", op.Replayed)
		}
		return ""
	case history.Rejected:
		if op.Status == http.StatusTooManyRequests {
			// A capacity rejection says when its entry expires, in whole
			// seconds, at least 1 on a replay; rule (d) reads it.
			if secs, err := strconv.ParseInt(strings.TrimSpace(op.RetryAfter), 10, 64); err != nil || secs < 1 {
				return fmt.Sprintf("429 job_rejected with Retry-After %q, not a number of seconds", op.RetryAfter)
			}
		}
		return ""
	case history.Failed:
		if op.Status == http.StatusConflict && op.Code == string(api.CodeIdempotencyKeyExpired) {
			return "" // the key outlived its entry; nothing was executed again
		}
		if op.Status == http.StatusUnprocessableEntity && op.Code == string(api.CodeIdempotencyKeyClaimed) && len(op.Datacenters) == 0 {
			// An omitted list in a federation whose rounds met claims for
			// other homes too often: the contract's answer, nothing cached.
			return ""
		}
		return fmt.Sprintf("status %d code %q", op.Status, op.Code)
	}
	if op.Status == http.StatusInternalServerError {
		// Retried like a 503, but the contract reserves 500 for bugs: faults
		// must surface as 503 unavailable.
		return fmt.Sprintf("status 500 code %q: the contract reserves 500 for bugs", op.Code)
	}
	return ""
}

// canonicalOrRaw renders a JSON value canonically: object keys sorted, no
// insignificant whitespace, numbers normalized (1.0 and 1 are equal). An absent
// value is null. Invalid JSON is returned as it is, so it never compares equal
// to valid JSON by accident.
func canonicalOrRaw(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "null"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "invalid JSON " + strconv.Quote(string(raw))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(normalizeNumbers(v)); err != nil {
		return "invalid JSON " + strconv.Quote(string(raw))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				return json.Number(strconv.FormatInt(int64(f), 10))
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
		return x
	case map[string]any:
		for key, e := range x {
			x[key] = normalizeNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
		return x
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedTIDs[V any](m map[tid]V) []tid {
	out := make([]tid, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].tenant != out[j].tenant {
			return out[i].tenant < out[j].tenant
		}
		return out[i].id < out[j].id
	})
	return out
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
