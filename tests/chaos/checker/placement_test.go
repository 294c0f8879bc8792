package checker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/history"
)

var threeDCs = []string{"dc1", "dc2", "dc3"}

// naming sets the datacenters every op names (none: an omitted list).
func naming(dcs []string, ops ...history.Op) []history.Op {
	for i := range ops {
		ops[i].Datacenters = dcs
	}
	return ops
}

func claimedKey(seq, home string) api.KeyInfo {
	return api.KeyInfo{Key: key(seq), State: api.KeyStateClaimed, Home: home, ExpiresAt: "2026-11-21T12:05:00.000Z"}
}

// placesWorld is a three-datacenter history of omitted and named lists, and
// the entries each datacenter holds: keys 1, 4 and 5 are clean, 2 and 3
// break rule (j), 6 rule (k), 7 rule (h).
func placesWorld(t *testing.T) (*federationGate, []Config, []history.Op) {
	t.Helper()
	g := newFederationGate(t)
	var cfgs []Config
	for _, dc := range threeDCs {
		cfgs = append(cfgs, Config{GateURL: g.srv.URL, Datacenter: dc})
	}
	var ops []history.Op
	// 1: omitted, a 503 then a 201 through another datacenter's gate; home
	// dc2, claims elsewhere.
	ops = append(ops, naming(nil,
		sub("1", gateA, 1, false, 0, 1, history.Outcome{Status: 503}),
		sub("1", gateB, 2, false, 2, 3, created("job-1", "h", true)))...)
	g.set("dc1", key("1"), claimedKey("1", "dc2"))
	g.set("dc2", key("1"), committedKey("1", "job-1"))
	g.set("dc3", key("1"), claimedKey("1", "dc2"))
	// 2: omitted, admitted in two datacenters.
	ops = append(ops, naming(nil, sub("2", gateA, 1, false, 4, 5, created("job-2", "h", false)))...)
	g.set("dc1", key("2"), committedKey("2", "job-2"))
	g.set("dc2", key("2"), claimedKey("2", "dc1"))
	g.set("dc3", key("2"), committedKey("2", "job-2"))
	// 3: omitted, answered 201, but only claims anywhere.
	ops = append(ops, naming(nil, sub("3", gateA, 1, false, 6, 7, created("job-3", "h", false)))...)
	g.set("dc2", key("3"), claimedKey("3", "dc1"))
	g.set("dc3", key("3"), claimedKey("3", "dc1"))
	// 4: omitted, only a 503: claims and no job is fine.
	ops = append(ops, naming(nil, sub("4", gateA, 1, false, 8, 9, history.Outcome{Status: 503}))...)
	g.set("dc2", key("4"), claimedKey("4", "dc1"))
	// 5: names dc1 and dc2, committed in both.
	ops = append(ops, naming([]string{"dc1", "dc2"}, sub("5", gateA, 1, false, 10, 11, created("job-5", "h", false)))...)
	g.set("dc1", key("5"), committedKey("5", "job-5"))
	g.set("dc2", key("5"), committedKey("5", "job-5"))
	// 6: names dc1 and dc3, but dc2 holds it too.
	ops = append(ops, naming([]string{"dc1", "dc3"}, sub("6", gateA, 1, false, 12, 13, created("job-6", "h", false)))...)
	g.set("dc1", key("6"), committedKey("6", "job-6"))
	g.set("dc2", key("6"), committedKey("6", "job-6"))
	g.set("dc3", key("6"), committedKey("6", "job-6"))
	// 7: names dc2 and dc3, which hold different jobs.
	ops = append(ops, naming([]string{"dc2", "dc3"}, sub("7", gateA, 1, false, 14, 15, history.Outcome{Status: 503}))...)
	g.set("dc2", key("7"), committedKey("7", "job-7"))
	g.set("dc3", key("7"), committedKey("7", "job-7x"))
	return g, cfgs, ops
}

func TestCheckFederationPlaces(t *testing.T) {
	_, cfgs, ops := placesWorld(t)
	res, places, err := CheckFederationPlaces(context.Background(), cfgs, ops, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		seq  string
		rule Rule
		in   string
	}{
		{"2", RuleOneHome, "admitted in dc1,dc3"},
		{"3", RuleOneHome, "no datacenter holds its final entry"},
		{"6", RuleOnlyNamed, "dc2: committed"},
		{"7", RuleEverywhere, "different jobs"},
	}
	if len(res.Violations) != len(want) {
		t.Fatalf("want %d violations:\n%s", len(want), res.Summary())
	}
	for i, w := range want {
		v := res.Violations[i]
		if v.Key != key(w.seq) || v.Rule != w.rule || !strings.Contains(v.Detail, w.in) || len(v.Ops) == 0 {
			t.Errorf("violation %d: %s; want key %s, rule %s, %q", i, v, w.seq, w.rule, w.in)
		}
	}
	if pl, _ := places.Of("acme", key("1")); pl.Home != "dc2" || pl.JobID != "job-1" || !pl.Omitted() {
		t.Errorf("key 1 placed %+v, want home dc2", pl)
	}
	if pl, _ := places.Of("acme", key("4")); pl.Home != "" || pl.JobID != "" {
		t.Errorf("key 4 placed %+v, want no home", pl)
	}
	if pl, _ := places.Of("acme", key("5")); strings.Join(pl.Committed, ",") != "dc1,dc2" || pl.Omitted() {
		t.Errorf("key 5 placed %+v, want committed in dc1,dc2", pl)
	}
}

// An omitted list with no home belongs in no datacenter, so no
// datacenter's Check holds it to rules (c)-(g): CheckFederationPlaces does.
func TestCheckFederationPlacesHomeless(t *testing.T) {
	g, cfgs, ops := placesWorld(t)
	// 8: omitted, answered only 422 idempotency_key_reused (it was sent
	// with one body): claims and no job.
	ops = append(ops, naming(nil, sub("8", gateA, 1, false, 16, 17, history.Outcome{Status: 422, Code: "idempotency_key_reused"}))...)
	ops[len(ops)-1].Index = len(ops) - 1
	g.set("dc2", key("8"), claimedKey("8", "dc1"))
	res, places, err := CheckFederationPlaces(context.Background(), cfgs, ops, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if pl, _ := places.Of("acme", key("8")); pl.Home != "" {
		t.Fatalf("key 8 placed %+v, want no home", pl)
	}
	var got []Violation
	for _, v := range res.Violations {
		if v.Key == key("8") {
			got = append(got, v)
		}
	}
	if len(got) != 1 || got[0].Rule != RuleExpectedAnswer || len(got[0].Ops) != 1 {
		t.Fatalf("want one (g) violation on key 8:\n%s", res.Summary())
	}
	if len(res.Violations) != 5 {
		t.Fatalf("want the 4 violations of placesWorld and key 8's:\n%s", res.Summary())
	}
}

// A job of an omitted list outside its home, and one of a named list
// outside its list, are reported by the datacenter that lists them; the
// keys that belong there are checked there and nowhere else.
func TestForeignJobs(t *testing.T) {
	_, cfgs, ops := placesWorld(t)
	_, places, err := CheckFederationPlaces(context.Background(), cfgs, ops, 0)
	if err != nil {
		t.Fatal(err)
	}
	in, elsewhere := places.opsIn(ops, "dc1")
	keysIn := map[string]bool{}
	for _, op := range in {
		keysIn[op.Key] = true
	}
	// dc1 checks the keys naming it (5, 6), not key 1 (home dc2), key 2
	// (two homes: it belongs nowhere) or key 7 (dc2 and dc3).
	if !keysIn[key("5")] || !keysIn[key("6")] || keysIn[key("1")] || keysIn[key("2")] || keysIn[key("7")] {
		t.Errorf("dc1 checks keys %v", keysIn)
	}
	if _, ok := elsewhere[tk{"acme", key("1")}]; !ok {
		t.Error("key 1 does not belong elsewhere than dc1")
	}
	clean := &clusterState{listed: map[tid]api.Job{{"acme", "job-5"}: job("job-5", "5")}, fetched: map[tid]*api.Job{}}
	if vs := foreignJobs("dc1", elsewhere, clean, nil); len(vs) != 0 {
		t.Fatalf("clean dc1: %v", vs)
	}
	dirty := &clusterState{listed: map[tid]api.Job{
		{"acme", "job-5"}: job("job-5", "5"),
		{"acme", "job-1"}: job("job-1", "1"), // omitted list, home dc2
		{"acme", "job-7"}: job("job-7", "7"), // names dc2 and dc3
	}, fetched: map[tid]*api.Job{}}
	vs := foreignJobs("dc1", elsewhere, dirty, nil)
	if len(vs) != 2 || vs[0].Key != key("1") || vs[0].Rule != RuleOneHome || !strings.Contains(vs[0].Detail, "its home is dc2") ||
		vs[1].Key != key("7") || vs[1].Rule != RuleOnlyNamed {
		t.Fatalf("dirty dc1: %v", vs)
	}
}

// A job must run where it was admitted and nowhere else.
func TestCheckRunPlaces(t *testing.T) {
	_, cfgs, ops := placesWorld(t)
	_, places, err := CheckFederationPlaces(context.Background(), cfgs, ops, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Only the clean keys: 1 (home dc2), 4 (no job), 5 (dc1 and dc2).
	var clean []history.Op
	for _, op := range ops {
		if op.Key == key("1") || op.Key == key("4") || op.Key == key("5") {
			clean = append(clean, op)
		}
	}
	runs := []*Runs{{}, {}, {}}
	runs[1].Add("job-1")
	runs[0].Add("job-5")
	runs[1].Add("job-5")
	runs[1].Add("job-5") // a redelivery is no violation
	if res := CheckRunPlaces(places, threeDCs, runs, clean); !res.OK() {
		t.Fatalf("clean runs:\n%s", res.Summary())
	}
	runs[0].Add("job-1") // an omitted list run outside its home
	runs[2].Add("job-5") // a named list run outside its list
	res := CheckRunPlaces(places, threeDCs, runs, clean)
	if len(res.Violations) != 2 {
		t.Fatalf("want 2 violations:\n%s", res.Summary())
	}
	if v := res.Violations[0]; v.Key != key("1") || v.Rule != RuleOneHome || !strings.Contains(v.Detail, "ran in [dc1,dc2]") {
		t.Errorf("first violation %s", v)
	}
	if v := res.Violations[1]; v.Key != key("5") || v.Rule != RuleOnlyNamed || !strings.Contains(v.Detail, "ran in [dc1,dc2,dc3]") {
		t.Errorf("second violation %s", v)
	}
	// A job never run where it was admitted (lost to the workers) too.
	res = CheckRunPlaces(places, threeDCs, []*Runs{{}, {}, {}}, clean)
	if len(res.Violations) != 2 {
		t.Fatalf("want 2 violations for jobs never run:\n%s", res.Summary())
	}
}
