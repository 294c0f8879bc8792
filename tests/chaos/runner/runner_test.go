package runner

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/tests/chaos/checker"
	"github.com/once-dev/once/tests/chaos/fakegate"
	"github.com/once-dev/once/tests/chaos/history"
	"github.com/once-dev/once/tests/chaos/nemesis"
	"github.com/once-dev/once/tests/chaos/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// saveRun runs the workload against a fake gate and saves its history the
// way Run does, as a run directory for Recheck.
func saveRun(t *testing.T, opts fakegate.Options) (dir, gateURL string, g *fakegate.Gate) {
	t.Helper()
	byToken := map[string]string{}
	for tenant, token := range Tenants {
		byToken[token] = tenant
	}
	opts.Tokens = byToken
	g = fakegate.New(opts)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	t.Cleanup(g.Close)
	w, err := workload.New(workload.Config{GateURLs: []string{srv.URL}, Tokens: Tenants, Clients: 4,
		Submissions: 80, Seed: 5, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder()
	if _, err := w.Run(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := writeHistory(filepath.Join(dir, HistoryFile), rec.Ops()); err != nil {
		t.Fatal(err)
	}
	return dir, srv.URL, g
}

// A saved run is checked again through a gate: a clean one passes, and a gate
// that lost a key after a 503 (a second job for the key) is caught by rule (a)
// from the saved history alone.
func TestRecheckThroughAGate(t *testing.T) {
	dir, url, _ := saveRun(t, fakegate.Options{Seed: 1, UnavailableAfterCommit: 0.2})
	res, err := Recheck(t.Context(), RecheckOptions{Dir: dir, GateURL: url, RequireKeys: true})
	if err != nil || !res.OK() || res.Checked.KeysCommitted == 0 {
		t.Fatalf("clean run: %v\n%s", err, res.Summary())
	}

	dir, url, _ = saveRun(t, fakegate.Options{Seed: 1, UnavailableAfterCommit: 0.3, Bug: fakegate.ForgetKeyOn503})
	res, err = Recheck(t.Context(), RecheckOptions{Dir: dir, GateURL: url})
	if err != nil {
		t.Fatal(err)
	}
	if by := res.ByRule(); by[checker.RuleAtMostOneJob] == 0 {
		t.Fatalf("a second job per key went unnoticed: %v\n%s", by, res.Summary())
	}
}

// Without a cluster, Recheck checks the recorded answers: two 201s naming two
// job ids for one key break rule (c), and the history lines are in the report.
func TestRecheckHistoryOnly(t *testing.T) {
	dir, _, _ := saveRun(t, fakegate.Options{Seed: 2})
	res, err := Recheck(t.Context(), RecheckOptions{Dir: dir})
	if err != nil || !res.OK() {
		t.Fatalf("clean history: %v\n%s", err, res.Summary())
	}

	f, err := os.Open(filepath.Join(dir, HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := history.ReadJSONL(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Answer the last 201 of some key again, replayed, with another job id.
	var forged history.Op
	for _, op := range ops {
		if op.Class() == history.Committed {
			forged = op
		}
	}
	forged.Index = len(ops)
	forged.JobID += "-other"
	forged.Replayed = "true"
	ops = append(ops, forged)
	if err := writeHistory(filepath.Join(dir, HistoryFile), ops); err != nil {
		t.Fatal(err)
	}
	res, err = Recheck(t.Context(), RecheckOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if by := res.ByRule(); by[checker.RuleSameJobID] != 1 || !strings.Contains(res.Summary(), forged.JobID) {
		t.Fatalf("forged answer not caught by rule (c): %v\n%s", by, res.Summary())
	}
}

func TestSummary(t *testing.T) {
	ops := []history.Op{
		{Kind: history.KindSubmit, Done: true, Outcome: history.Outcome{Status: 201, Replayed: "false", JobID: "j1"}},
		{Kind: history.KindSubmit, Done: true, Outcome: history.Outcome{Status: 201, Replayed: "true", JobID: "j1"}},
		{Kind: history.KindSubmit, Done: true, Outcome: history.Outcome{Status: 503, Code: "unavailable"}},
		{Kind: history.KindSubmit, Done: true, Outcome: history.Outcome{Err: "i/o timeout", Timeout: true}},
		{Kind: history.KindSubmit, Done: true, Outcome: history.Outcome{Err: "connection refused"}},
		{Kind: history.KindSubmit},
		{Kind: history.KindNemesis, Note: "kill-leader#1: SIGKILL manager1", Done: true},
	}
	s := Summary{Seed: 9, Faults: map[nemesis.Kind]int{nemesis.KillLeader: 2, nemesis.PauseLeader: 1}, Check: &checker.Result{}}
	s.countAnswers(ops)
	want := map[string]int{"201": 1, "201 replayed": 1, "503 unavailable": 1, "timeout": 1, "transport error": 1, "not completed": 1}
	if s.Requests != 6 || len(s.Answers) != len(want) {
		t.Fatalf("requests %d, answers %v; want 6, %v", s.Requests, s.Answers, want)
	}
	for k, v := range want {
		if s.Answers[k] != v {
			t.Fatalf("answers %v; want %v", s.Answers, want)
		}
	}
	out := s.String()
	for _, line := range []string{"seed 9", "requests    6 ", "faults      3 injected: kill-leader 2; pause-leader 1;", "violations  0", "PASS: zero violations"} {
		if !strings.Contains(out, line) {
			t.Errorf("summary lacks %q:\n%s", line, out)
		}
	}
	s.Check = &checker.Result{Violations: []checker.Violation{{Rule: checker.RuleAtMostOneJob, Key: "k"}}}
	if out := s.String(); s.OK() || !strings.Contains(out, "FAIL: 1 violations") || !strings.Contains(out, "-seed 9") {
		t.Errorf("a violation does not fail the summary:\n%s", out)
	}
	s.Check, s.Errors = nil, []string{"nemesis: cluster did not recover"}
	if out := s.String(); s.OK() || !strings.Contains(out, "not checked") || !strings.Contains(out, "did not complete") {
		t.Errorf("an unchecked run passes:\n%s", out)
	}
}

func TestRunValidates(t *testing.T) {
	bin := t.TempDir()
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no duration", Options{BaseDir: t.TempDir(), BinDir: bin}, "Duration"},
		{"no dir", Options{Duration: time.Second, BinDir: bin}, "BaseDir"},
		{"no bin", Options{Duration: time.Second, BaseDir: t.TempDir()}, "BinDir"},
		{"no binaries", Options{Duration: time.Second, BaseDir: t.TempDir(), BinDir: bin}, "make build"},
		{"datacenters without multidc", Options{Duration: time.Second, BaseDir: t.TempDir(), BinDir: bin, Datacenters: 3}, "MultiDC"},
		{"four datacenters", Options{Duration: time.Second, BaseDir: t.TempDir(), BinDir: bin, MultiDC: true, Datacenters: 4}, "2 to 3"},
	} {
		_, err := Run(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}

func TestMainExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-help"}, 0},
		{[]string{"-duration", "0"}, 2},
		{[]string{"-faults", "kill-leader,reboot"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"-datacenters", "3"}, 2},
		{[]string{"-multidc", "-datacenters", "4"}, 2},
		{[]string{"-recheck", filepath.Join(t.TempDir(), "missing")}, 1},
		{[]string{"-duration", "1s", "-bin", t.TempDir(), "-dir", t.TempDir()}, 1},
	} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), tc.args, &out, &errb); code != tc.code {
			t.Errorf("oncechaos %v: exit %d, want %d\n%s%s", tc.args, code, tc.code, out.String(), errb.String())
		}
	}
}

// A three-datacenter run draws every list, a third each: all, a strict
// subset, omitted.
func TestDatacenterSets(t *testing.T) {
	names := datacenterNames(3)
	if strings.Join(names, ",") != "dc1,dc2,dc3" {
		t.Fatalf("names %v", names)
	}
	n := map[string]int{}
	sets := datacenterSets(names)
	for _, s := range sets {
		switch l := strings.Join(s, ","); {
		case s == nil:
			n["omitted"]++
		case l == "dc1,dc2,dc3":
			n["all"]++
		default:
			n["subset"]++
			n[l]++
		}
	}
	if n["all"] != n["omitted"] || n["all"] != n["subset"] || n["dc1,dc2"] != 1 || n["dc1,dc3"] != 1 || n["dc2,dc3"] != 1 || n["dc3"] != 1 {
		t.Fatalf("%d sets: %v", len(sets), n)
	}
}

// Rule (i) waits for the largest skew either way: restoring a clock that
// was set back is a forward jump as large (a leader made then stamps ahead
// of real time until its group's view catches up).
func TestWorkersWaitCountsSkewEitherWay(t *testing.T) {
	events := []nemesis.Event{{Kind: nemesis.KillLeader}, {Kind: nemesis.ClockSkew, Skew: 3 * time.Minute},
		{Kind: nemesis.ClockSkew, Skew: -528 * time.Second}}
	for _, c := range []struct {
		wait   time.Duration
		events []nemesis.Event
		want   time.Duration
	}{
		{0, nil, 2 * time.Minute},
		{30 * time.Second, events[:1], 30 * time.Second},
		{0, events[:2], 5 * time.Minute},
		{0, events, 2*time.Minute + 528*time.Second},
	} {
		if got := workersWait(c.wait, c.events); got != c.want {
			t.Errorf("workersWait(%v, %d events) = %v, want %v", c.wait, len(c.events), got, c.want)
		}
	}
}
