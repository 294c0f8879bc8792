package checker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/fakegate"
	"github.com/once-dev/once/tests/chaos/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	nonce   = "0123456789abcdef"
	jobType = "chaos.noop"
	gateA   = "http://127.0.0.1:1"
	gateB   = "http://127.0.0.1:2"
)

var tokens = map[string]string{"acme": "tok-acme", "globex": "tok-globex"}

// key returns the structured key of sequence n of client chaos:c0 (a client id
// with a colon in it, as the contract allows).
func key(n string) string { return "chaos:c0:" + n + ":" + nonce }

func payload(n string) json.RawMessage {
	return json.RawMessage(`{"client":"chaos:c0","seq":` + n + `}`)
}

// world is a crafted history and the cluster table it should meet. Each rule
// test breaks one thing in a clean world.
type world struct {
	ops  []history.Op
	gate *fakegate.Gate
	cfg  Config
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// sub is one recorded submit attempt as acme.
func sub(seq string, gate string, attempt int, dup bool, inv, comp int, out history.Outcome) history.Op {
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		panic(err)
	}
	return history.Op{
		Kind: history.KindSubmit, Client: "chaos:c0", Gate: gate, Tenant: "acme", Key: key(seq), Seq: n,
		Attempt: attempt, Dup: dup, Type: jobType, Payload: payload(seq),
		Invoke: ms(inv), Complete: ms(comp), Done: true, Outcome: out,
	}
}

func created(id, hash string, replayed bool) history.Outcome {
	r := "false"
	if replayed {
		r = "true"
	}
	return history.Outcome{Status: 201, JobID: id, Replayed: r, BodyHash: hash}
}

func job(id, seq string) api.Job {
	return api.Job{JobID: id, Type: jobType, Status: api.JobStatusCommitted, IdempotencyKey: key(seq),
		CreatedAt: "2026-11-21T12:00:00.000Z", Datacenters: map[string]api.DatacenterStatus{"dc1": {Status: "committed"}},
		Payload: payload(seq)}
}

func committedKey(seq, id string) api.KeyInfo {
	return api.KeyInfo{Key: key(seq), State: api.KeyStateCommitted, JobID: &id, ExpiresAt: "2026-11-21T12:05:00.000Z"}
}

// newWorld builds the clean world: every kind of legitimate history, including
// indeterminate attempts that did and did not create their job, rejections, a
// commit after a rejection expired, payloads stored in another canonical form,
// the same key in a second tenant, and a job nobody in the history submitted.
func newWorld(t *testing.T) *world {
	t.Helper()
	ops := []history.Op{
		// k1: committed, and replayed to the duplicate through gate B.
		sub("1", gateA, 1, false, 0, 10, created("J1", "h1", false)),
		sub("1", gateB, 1, true, 5, 15, created("J1", "h1", true)),
		// k2: a timeout, then the retry is a replay.
		sub("2", gateA, 1, false, 20, 120, history.Outcome{Err: "context deadline exceeded", Timeout: true}),
		sub("2", gateB, 2, false, 130, 140, created("J2", "h2", true)),
		// k3: no definite answer at all, but the job exists (the timed-out
		// attempt made it).
		sub("3", gateA, 1, false, 150, 155, history.Outcome{Status: 503, Code: "unavailable", RetryAfter: "1"}),
		sub("3", gateB, 2, false, 160, 260, history.Outcome{Err: "context deadline exceeded", Timeout: true}),
		// k4: no answer, and no job.
		sub("4", gateA, 1, false, 270, 271, history.Outcome{Err: "connection refused"}),
		// k5: rejected, the rejection replayed.
		sub("5", gateA, 1, false, 300, 305, history.Outcome{Status: 429, Code: "job_rejected", RetryAfter: "60", Replayed: "false", BodyHash: "h5"}),
		sub("5", gateB, 1, true, 306, 310, history.Outcome{Status: 429, Code: "job_rejected", RetryAfter: "59", Replayed: "true", BodyHash: "h5"}),
		// k6: rejected with Retry-After 1, then judged afresh after it ran out.
		sub("6", gateA, 1, false, 400, 405, history.Outcome{Status: 429, Code: "job_rejected", RetryAfter: "1", Replayed: "false"}),
		sub("6", gateB, 1, true, 2000, 2010, created("J6", "h6", false)),
		// k7: in progress, then committed; stored payload differs only in form.
		sub("7", gateA, 1, false, 2100, 2101, history.Outcome{Status: 409, Code: "request_in_progress", RetryAfter: "1"}),
		sub("7", gateA, 2, false, 2110, 2120, created("J7", "h7", false)),
	}
	ops[11].Payload = json.RawMessage(`{"b":[1,2],"a":{"y":1.0,"x":"s"}}`)
	ops[12].Payload = ops[11].Payload
	// globex sends acme's k1 key: a different submission.
	g := sub("1", gateA, 1, false, 2200, 2210, created("G1", "g1", false))
	g.Tenant = "globex"
	ops = append(ops, g)
	// A nemesis operation, which the checker ignores.
	ops = append(ops, history.Op{Kind: history.KindNemesis, Client: "nemesis", Note: "kill manager-2", Invoke: ms(50), Complete: ms(51), Done: true})
	for i := range ops {
		ops[i].Index = i
	}

	gw := fakegate.New(fakegate.Options{Tokens: map[string]string{"tok-acme": "acme", "tok-globex": "globex"}, MaxPage: 2})
	for _, j := range []api.Job{job("J1", "1"), job("J2", "2"), job("J3", "3"), job("J6", "6"), job("J7", "7")} {
		gw.PutJob("acme", j)
	}
	j7 := job("J7", "7")
	j7.Payload = json.RawMessage(` { "a" : {"x":"s","y":1}, "b":[1, 2.0] } `)
	gw.PutJob("acme", j7)
	foreign := job("JX", "1")
	foreign.IdempotencyKey = "someone-else:1:fedcba9876543210"
	gw.PutJob("acme", foreign)
	gw.PutJob("globex", job("G1", "1"))
	for _, k := range []api.KeyInfo{committedKey("1", "J1"), committedKey("2", "J2"), committedKey("3", "J3"),
		committedKey("6", "J6"), committedKey("7", "J7"), {Key: key("5"), State: api.KeyStateRejected}} {
		gw.PutKey("acme", k)
	}
	gw.PutKey("globex", committedKey("1", "G1"))

	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	t.Cleanup(gw.Close)
	return &world{ops: ops, gate: gw, cfg: Config{GateURL: srv.URL, Tokens: tokens, RequireKeys: true}}
}

func (w *world) check(t *testing.T) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Check(ctx, w.cfg, w.ops)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	t.Log(res.Summary())
	return res
}

// expectOne asserts that res holds exactly one violation, of rule on key.
func expectOne(t *testing.T, res Result, rule Rule, tenant, k string) Violation {
	t.Helper()
	if len(res.Violations) != 1 {
		t.Fatalf("got %d violations, want exactly one %s:\n%s", len(res.Violations), rule, res.Summary())
	}
	v := res.Violations[0]
	if v.Rule != rule || v.Tenant != tenant || v.Key != k {
		t.Fatalf("got %s on %s/%s, want %s on %s/%s", v.Rule, v.Tenant, v.Key, rule, tenant, k)
	}
	// The report carries the key's history lines.
	s := v.String()
	for _, op := range v.Ops {
		if !strings.Contains(s, op.String()) {
			t.Fatalf("report lacks history line %s:\n%s", op, s)
		}
	}
	if !strings.Contains(res.Summary(), string(rule)) {
		t.Fatalf("summary does not name %s", rule)
	}
	return v
}

func TestCleanHistoryPasses(t *testing.T) {
	w := newWorld(t)
	res := w.check(t)
	if !res.OK() {
		t.Fatalf("clean world has violations:\n%s", res.Summary())
	}
	c := res.Checked
	want := Counts{Ops: 14, Indeterminate: 5, Keys: 8, KeysCommitted: 5, KeysRejected: 2, KeysUnresolved: 2,
		JobsListed: 7, JobsFetched: 6, JobsNotFound: 0, KeysFound: 7, KeysNotFound: 1}
	if c != want {
		t.Fatalf("counts\n got %+v\nwant %+v", c, want)
	}
	if h := CheckHistory(w.ops); !h.OK() {
		t.Fatalf("history-only check of the clean world:\n%s", h.Summary())
	}
}

func TestRuleAtMostOneJob(t *testing.T) {
	t.Run("indeterminate key", func(t *testing.T) {
		// k3 was never answered: zero or one job is fine, two is not.
		w := newWorld(t)
		w.gate.PutJob("acme", job("J3b", "3"))
		v := expectOne(t, w.check(t), RuleAtMostOneJob, "acme", key("3"))
		if strings.Join(v.JobIDs, ",") != "J3,J3b" {
			t.Fatalf("jobs %v", v.JobIDs)
		}
	})
	t.Run("answered key", func(t *testing.T) {
		w := newWorld(t)
		w.gate.PutJob("acme", job("J1b", "1"))
		expectOne(t, w.check(t), RuleAtMostOneJob, "acme", key("1"))
	})
	t.Run("key outside the history", func(t *testing.T) {
		w := newWorld(t)
		j := job("JY", "1")
		j.IdempotencyKey = "someone-else:1:fedcba9876543210"
		w.gate.PutJob("acme", j)
		v := expectOne(t, w.check(t), RuleAtMostOneJob, "acme", "someone-else:1:fedcba9876543210")
		if len(v.Ops) != 0 {
			t.Fatalf("foreign key has history lines: %v", v.Ops)
		}
	})
	t.Run("unrejected key without answers", func(t *testing.T) {
		// k4's only attempt failed to connect; the cluster shows two jobs.
		w := newWorld(t)
		w.gate.PutJob("acme", job("J4", "4"))
		w.gate.PutJob("acme", job("J4b", "4"))
		expectOne(t, w.check(t), RuleAtMostOneJob, "acme", key("4"))
	})
}

func TestRuleJobMatches(t *testing.T) {
	for name, mutate := range map[string]func(*api.Job){
		"payload": func(j *api.Job) { j.Payload = json.RawMessage(`{"client":"chaos:c0","seq":3}`) },
		"type":    func(j *api.Job) { j.Type = "chaos.other" },
		"key":     func(j *api.Job) { j.IdempotencyKey = key("99") },
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			j := job("J2", "2")
			mutate(&j)
			w.gate.PutJob("acme", j)
			v := expectOne(t, w.check(t), RuleJobMatches, "acme", key("2"))
			if !strings.Contains(v.Detail, name) {
				t.Fatalf("detail does not mention %s: %s", name, v.Detail)
			}
		})
	}
}

func TestRuleJobMatchesUnanswered(t *testing.T) {
	// k3 was never answered, but its timed-out attempt made J3: the job
	// still holds what was sent with the key.
	t.Run("job of the key", func(t *testing.T) {
		w := newWorld(t)
		j := job("J3", "3")
		j.Payload = json.RawMessage(`{"client":"chaos:c9","seq":3}`)
		w.gate.PutJob("acme", j)
		v := expectOne(t, w.check(t), RuleJobMatches, "acme", key("3"))
		if strings.Join(v.JobIDs, ",") != "J3" || !strings.Contains(v.Detail, "payload") {
			t.Fatalf("violation %s", v)
		}
	})
	t.Run("entry names another key's job", func(t *testing.T) {
		w := newWorld(t)
		w.gate.PutKey("acme", committedKey("3", "J6"))
		v := expectOne(t, w.check(t), RuleJobMatches, "acme", key("3"))
		if strings.Join(v.JobIDs, ",") != "J6" || !strings.Contains(v.Detail, "idempotency_key") {
			t.Fatalf("violation %s", v)
		}
	})
}

func TestRuleSameJobID(t *testing.T) {
	t.Run("key entry names another job", func(t *testing.T) {
		// The cluster's entry for k1 points at k6's job: cross-talk.
		w := newWorld(t)
		w.gate.PutKey("acme", committedKey("1", "J6"))
		v := expectOne(t, w.check(t), RuleSameJobID, "acme", key("1"))
		if strings.Join(v.JobIDs, ",") != "J1,J6" {
			t.Fatalf("jobs %v", v.JobIDs)
		}
	})
	t.Run("one job for two keys", func(t *testing.T) {
		// k2's retry was answered with k1's job (and the same bytes): both
		// keys report it, from the history alone.
		w := newWorld(t)
		w.ops[3].JobID, w.ops[3].BodyHash = "J1", "h1"
		res := CheckHistory(w.ops)
		if len(res.Violations) != 2 {
			t.Fatalf("want a violation on each key:\n%s", res.Summary())
		}
		for i, k := range []string{key("1"), key("2")} {
			if v := res.Violations[i]; v.Rule != RuleSameJobID || v.Key != k || strings.Join(v.JobIDs, ",") != "J1" {
				t.Fatalf("violation %d: %s", i, v)
			}
		}
	})
	t.Run("answers disagree", func(t *testing.T) {
		// The duplicate's replay named another job: caught from the history
		// alone.
		w := newWorld(t)
		w.ops[1].JobID = "J9"
		expectOne(t, CheckHistory(w.ops), RuleSameJobID, "acme", key("1"))
	})
}

func TestRuleCommitXorReject(t *testing.T) {
	t.Run("201 while the rejection lives", func(t *testing.T) {
		w := newWorld(t)
		late := sub("5", gateB, 2, true, 320, 330, created("J5", "h5c", false))
		late.Index = len(w.ops)
		w.ops = append(w.ops, late)
		w.gate.PutJob("acme", job("J5", "5"))
		w.gate.PutKey("acme", committedKey("5", "J5"))
		expectOne(t, w.check(t), RuleCommitXorReject, "acme", key("5"))
	})
	t.Run("job behind a final rejection", func(t *testing.T) {
		// Every attempt was rejected, yet the cluster holds a job.
		w := newWorld(t)
		for _, i := range []int{7, 8} {
			w.ops[i].Status, w.ops[i].RetryAfter = 422, ""
		}
		w.gate.PutJob("acme", job("J5", "5"))
		expectOne(t, w.check(t), RuleCommitXorReject, "acme", key("5"))
	})
	t.Run("history only", func(t *testing.T) {
		w := newWorld(t)
		// k6 commits 10ms after a rejection that said to come back in 5s.
		w.ops[9].RetryAfter = "5"
		w.ops[10].Invoke, w.ops[10].Complete = ms(406), ms(410)
		expectOne(t, CheckHistory(w.ops), RuleCommitXorReject, "acme", key("6"))
	})
}

func TestRuleNotForgotten(t *testing.T) {
	t.Run("job and entry gone", func(t *testing.T) {
		w := newWorld(t)
		w.gate.DeleteJob("acme", "J2")
		w.gate.DeleteKey("acme", key("2"))
		v := expectOne(t, w.check(t), RuleNotForgotten, "acme", key("2"))
		if !strings.Contains(v.Detail, "gone") {
			t.Fatalf("detail: %s", v.Detail)
		}
	})
	t.Run("missing from the list", func(t *testing.T) {
		w := newWorld(t)
		w.gate.HideJob("acme", "J1", true, false)
		expectOne(t, w.check(t), RuleNotForgotten, "acme", key("1"))
	})
	t.Run("missing from GET", func(t *testing.T) {
		w := newWorld(t)
		w.gate.HideJob("acme", "J7", false, true)
		expectOne(t, w.check(t), RuleNotForgotten, "acme", key("7"))
	})
	t.Run("entry gone", func(t *testing.T) {
		w := newWorld(t)
		w.gate.DeleteKey("acme", key("6"))
		expectOne(t, w.check(t), RuleNotForgotten, "acme", key("6"))

		// Without RequireKeys the entry may have expired: counted, not a
		// violation.
		w.cfg.RequireKeys = false
		res := w.check(t)
		if !res.OK() || res.Checked.KeysNotFound != 2 {
			t.Fatalf("want OK with 2 keys not found:\n%s", res.Summary())
		}
	})
	t.Run("entry no longer committed", func(t *testing.T) {
		w := newWorld(t)
		w.gate.PutKey("acme", api.KeyInfo{Key: key("2"), State: api.KeyStateRejected})
		w.cfg.RequireKeys = false
		expectOne(t, w.check(t), RuleNotForgotten, "acme", key("2"))
	})
	t.Run("committed entry names no job", func(t *testing.T) {
		w := newWorld(t)
		w.gate.PutKey("acme", api.KeyInfo{Key: key("2"), State: api.KeyStateCommitted, ExpiresAt: "2026-11-21T12:05:00.000Z"})
		v := expectOne(t, w.check(t), RuleNotForgotten, "acme", key("2"))
		if !strings.Contains(v.Detail, "names no job") {
			t.Fatalf("detail: %s", v.Detail)
		}
	})
	t.Run("entry names a lost job", func(t *testing.T) {
		// k3 was never answered, but its committed entry names a job that is
		// gone.
		w := newWorld(t)
		w.gate.DeleteJob("acme", "J3")
		expectOne(t, w.check(t), RuleNotForgotten, "acme", key("3"))
	})
}

func TestRuleNotForgottenExpired(t *testing.T) {
	// 409 idempotency_key_expired says the job ran and is not run again.
	expired := func(w *world, seq string) {
		op := sub(seq, gateB, 2, false, 2300, 2301, history.Outcome{Status: 409, Code: "idempotency_key_expired"})
		op.Index = len(w.ops)
		w.ops = append(w.ops, op)
	}
	t.Run("key that never ran", func(t *testing.T) {
		// k4 never reached the cluster: nothing ran, yet the client is told
		// it did.
		w := newWorld(t)
		expired(w, "4")
		v := expectOne(t, w.check(t), RuleNotForgotten, "acme", key("4"))
		if !strings.Contains(v.Detail, "idempotency_key_expired") {
			t.Fatalf("detail: %s", v.Detail)
		}
		// The history alone cannot tell, nor one datacenter of several.
		if res := CheckHistory(w.ops); !res.OK() {
			t.Fatal(res.Summary())
		}
		w.cfg.Datacenter = "dc1"
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
	t.Run("key that ran", func(t *testing.T) {
		// k3 was never answered, but its job exists.
		w := newWorld(t)
		expired(w, "3")
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
	t.Run("key outside the window", func(t *testing.T) {
		// The client committed sequence 2000: the ledger no longer knows
		// whether sequence 4 ran, and says expired either way.
		w := newWorld(t)
		expired(w, "4")
		op := sub("2000", gateA, 1, false, 2400, 2410, created("J2000", "h2000", false))
		op.Index = len(w.ops)
		w.ops = append(w.ops, op)
		w.gate.PutJob("acme", job("J2000", "2000"))
		w.gate.PutKey("acme", committedKey("2000", "J2000"))
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
}

// Rule (m) holds a 409 idempotency_key_expired to the key's recorded
// expiry: k1's 201 says its entry lives until 12:05:00 (the history started
// at 12:00:00), so an expired answer before 12:04:59 expired it early.
func TestRuleNoEarlyExpiry(t *testing.T) {
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	expired := func(w *world, inv, comp int) {
		w.cfg.Start = start
		w.ops[0].ExpiresAt = "2026-11-21T12:05:00.000Z"
		op := sub("1", gateB, 2, false, inv, comp, history.Outcome{Status: 409, Code: "idempotency_key_expired"})
		op.Index = len(w.ops)
		w.ops = append(w.ops, op)
	}
	t.Run("before the expiry", func(t *testing.T) {
		w := newWorld(t)
		expired(w, 2300, 2301)
		v := expectOne(t, w.check(t), RuleNoEarlyExpiry, "acme", key("1"))
		if !strings.Contains(v.Detail, "op 15 ") || !strings.Contains(v.Detail, "op 0's Idempotency-Expires-At 2026-11-21T12:05:00.000Z") {
			t.Fatalf("detail: %s", v.Detail)
		}
		// Without the history's start, or checking one datacenter of
		// several, the rule is not checked.
		w.cfg.Start = time.Time{}
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
		w.cfg.Start, w.cfg.Datacenter = start, "dc1"
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
	t.Run("within the clock bound", func(t *testing.T) {
		// Answered 700ms before the expiry: ledger time may run up to
		// MANAGER_MAX_CLOCK_OFFSET ahead.
		w := newWorld(t)
		expired(w, 299200, 299300)
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
	t.Run("after the expiry", func(t *testing.T) {
		w := newWorld(t)
		expired(w, 300100, 300200)
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
	t.Run("expiry told after the 409 was sent", func(t *testing.T) {
		// The answer carrying the expiry completed after the 409 was sent:
		// it says nothing of the entry the 409 met.
		w := newWorld(t)
		expired(w, 5, 6)
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
}

func TestRuleReplayIdentical(t *testing.T) {
	t.Run("201 replay", func(t *testing.T) {
		w := newWorld(t)
		w.ops[1].BodyHash = "other"
		expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("1"))
	})
	t.Run("rejection replay bytes", func(t *testing.T) {
		// k5's duplicate came while the rejection's entry lived: it is a
		// replay, the stored bytes.
		w := newWorld(t)
		w.ops[8].BodyHash = "other"
		expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("5"))
		expectOne(t, CheckHistory(w.ops), RuleReplayIdentical, "acme", key("5"))
	})
	t.Run("rejection replay status", func(t *testing.T) {
		w := newWorld(t)
		w.ops[8].Status = 422
		expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("5"))
	})
	t.Run("rejection judged afresh", func(t *testing.T) {
		// The duplicate came after the rejection's Retry-After: judged
		// afresh, it may be another rejection.
		w := newWorld(t)
		w.ops[7].RetryAfter = "1"
		w.ops[8].Invoke, w.ops[8].Complete = ms(1400), ms(1405)
		w.ops[8].Status, w.ops[8].BodyHash, w.ops[8].Replayed = 422, "h5b", "false"
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
	t.Run("expiry", func(t *testing.T) {
		// Every answer of a stored outcome carries the expiry the ledger
		// recorded at its first admission, as does the key's entry.
		stamp := func(w *world) {
			w.ops[0].ExpiresAt = "2026-11-21T12:05:00.000Z"
			w.ops[1].ExpiresAt = "2026-11-21T12:05:00Z" // the same instant
			w.ops[7].ExpiresAt = "2026-11-21T12:01:00.000Z"
			w.ops[8].ExpiresAt = "2026-11-21T12:01:00.000Z"
		}
		w := newWorld(t)
		stamp(w)
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
		w.ops[1].ExpiresAt = "2026-11-21T12:05:07.000Z"
		expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("1"))
		expectOne(t, CheckHistory(w.ops), RuleReplayIdentical, "acme", key("1"))

		w = newWorld(t)
		stamp(w)
		w.gate.PutKey("acme", api.KeyInfo{Key: key("1"), State: api.KeyStateCommitted, JobID: &[]string{"J1"}[0],
			ExpiresAt: "2026-11-21T12:09:00.000Z"})
		v := expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("1"))
		if !strings.Contains(v.Detail, "entry") {
			t.Fatalf("detail: %s", v.Detail)
		}

		w = newWorld(t)
		stamp(w)
		w.ops[8].ExpiresAt = "2026-11-21T12:02:00.000Z"
		expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("5"))
	})
	t.Run("admitted twice", func(t *testing.T) {
		// Two originals of one key, with the same job id and bytes: the
		// ledger admitted it twice. The history alone cannot tell (in a
		// federation each datacenter's ledger admits), one datacenter can.
		w := newWorld(t)
		w.ops[1].Replayed = "false"
		expectOne(t, w.check(t), RuleReplayIdentical, "acme", key("1"))
		if res := CheckHistory(w.ops); !res.OK() {
			t.Fatal(res.Summary())
		}
		w.cfg.Datacenter = "dc1"
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
}

func TestRuleExpectedAnswer(t *testing.T) {
	for name, out := range map[string]history.Outcome{
		"key reused":  {Status: 422, Code: "idempotency_key_reused"},
		"bad key":     {Status: 400, Code: "idempotency_key_invalid"},
		"no job id":   {Status: 201, Replayed: "false"},
		"no replayed": {Status: 201, JobID: "J1", BodyHash: "h1"},
		"internal":    {Status: 500, Code: "internal"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			op := sub("1", gateB, 2, true, 20, 30, out)
			op.Index = len(w.ops)
			w.ops = append(w.ops, op)
			expectOne(t, w.check(t), RuleExpectedAnswer, "acme", key("1"))
		})
	}
	t.Run("capacity rejection without Retry-After", func(t *testing.T) {
		// k4 never reached the cluster; its retry is rejected for capacity
		// without saying when to come back.
		w := newWorld(t)
		op := sub("4", gateB, 2, false, 280, 290, history.Outcome{Status: 429, Code: "job_rejected", Replayed: "false", BodyHash: "h4"})
		op.Index = len(w.ops)
		w.ops = append(w.ops, op)
		expectOne(t, w.check(t), RuleExpectedAnswer, "acme", key("4"))
	})
	t.Run("claimed omitted list is allowed", func(t *testing.T) {
		w := newWorld(t)
		op := sub("1", gateB, 2, true, 20, 30, history.Outcome{Status: 422, Code: "idempotency_key_claimed"})
		op.Index = len(w.ops)
		w.ops = append(w.ops, op)
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
		// A list that names datacenters is never claimed.
		w.ops[len(w.ops)-1].Datacenters = []string{"dc1"}
		expectOne(t, CheckHistory(w.ops), RuleExpectedAnswer, "acme", key("1"))
	})
	t.Run("expired key is allowed", func(t *testing.T) {
		w := newWorld(t)
		op := sub("1", gateB, 2, true, 20, 30, history.Outcome{Status: 409, Code: "idempotency_key_expired"})
		op.Index = len(w.ops)
		w.ops = append(w.ops, op)
		if res := w.check(t); !res.OK() {
			t.Fatal(res.Summary())
		}
	})
}

func TestSavedHistoryRechecks(t *testing.T) {
	w := newWorld(t)
	w.gate.PutJob("acme", job("J1b", "1"))
	first := w.check(t)

	var buf strings.Builder
	if err := history.WriteJSONL(&buf, w.ops); err != nil {
		t.Fatal(err)
	}
	var err error
	if w.ops, err = history.ReadJSONL(strings.NewReader(buf.String())); err != nil {
		t.Fatal(err)
	}
	again := w.check(t)
	if first.Summary() != again.Summary() {
		t.Fatalf("re-check differs:\n%s\n---\n%s", first.Summary(), again.Summary())
	}
}

func TestUnreadableClusterIsAnError(t *testing.T) {
	t.Run("unavailable", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", api.ContentTypeProblem)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"unavailable"}`))
		}))
		defer srv.Close()
		_, err := Check(context.Background(), Config{GateURL: srv.URL, ReadAttempts: 2}, newWorld(t).ops)
		if !errors.Is(err, ErrRead) {
			t.Fatalf("err = %v, want ErrRead", err)
		}
		t.Log(err)
	})
	t.Run("wrong token", func(t *testing.T) {
		w := newWorld(t)
		w.cfg.Tokens = map[string]string{"acme": "nope", "globex": "tok-globex"}
		_, err := Check(context.Background(), w.cfg, w.ops)
		if !errors.Is(err, ErrRead) || !strings.Contains(err.Error(), "401") {
			t.Fatalf("err = %v, want ErrRead with 401", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		w := newWorld(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Check(ctx, w.cfg, w.ops); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
}

func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{`{"a":1,"b":[true,null]}`, ` { "b" : [ true , null ], "a" : 1.0 } `},
		{`"x<y"`, `"x\u003cy"`},
		{``, `null`},
		{`1e2`, `100`},
	} {
		if x, y := canonicalOrRaw(json.RawMessage(tc.a)), canonicalOrRaw(json.RawMessage(tc.b)); x != y {
			t.Errorf("%s and %s: %s != %s", tc.a, tc.b, x, y)
		}
	}
	if canonicalOrRaw(json.RawMessage(`{"a":1}`)) == canonicalOrRaw(json.RawMessage(`{"a":2}`)) {
		t.Error("different payloads compare equal")
	}
}
