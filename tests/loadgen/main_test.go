package loadgen

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(t.Context(), args, &out, &errb)
	t.Logf("oncebench %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

func TestMainRunsWorkloadsAndWritesReport(t *testing.T) {
	t.Parallel()
	g, urls := startFake(t, 2, nil)
	path := filepath.Join(t.TempDir(), "results.json")
	code, out, _ := runMain(t, "-gates", strings.Join(urls, ","), "-workload", "unique,storm",
		"-requests", "40", "-concurrency", "4", "-payload-bytes", "100", "-out", path)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"workload", "p99 ms", "unique", "storm"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if got := g.requests.Load(); got != 80 {
		t.Errorf("fake received %d requests, want 80", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	if len(rep.Results) != 2 || rep.GOMAXPROCS == 0 {
		t.Fatalf("report has %d results", len(rep.Results))
	}
	u, s := rep.Results[0], rep.Results[1]
	if u.Name != "unique" || u.Requests != 40 || u.Keys != 40 || u.Spec.PayloadBytes != 100 || u.Spec.Concurrency != 4 {
		t.Errorf("unique: %+v", u)
	}
	if s.Name != "storm" || s.Requests != 40 || s.Keys != 1 || s.MaxJobIDsPerKey != 1 || s.Replayed != 39 {
		t.Errorf("storm: %d requests, %d keys, %d ids/key, %d replayed", s.Requests, s.Keys, s.MaxJobIDsPerKey, s.Replayed)
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".oncebench-*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
}

func TestMainOpenLoopWithTimeline(t *testing.T) {
	t.Parallel()
	_, urls := startFake(t, 1, nil)
	code, out, _ := runMain(t, "-gates", urls[0], "-workload", "failover", "-rate", "200", "-duration", "200ms")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"open 200/s", "longest gap", "failover second"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestMainWorkloadsFile(t *testing.T) {
	t.Parallel()
	g, urls := startFake(t, 1, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "w.json")
	os.WriteFile(file, []byte(`[{"name":"tiny-dups","keys":"duplicates","dup_ratio":0.5,"concurrency":2,"requests":20}]`), 0o644)
	code, out, _ := runMain(t, "-gates", urls[0], "-workloads-file", file, "-workload", "tiny-dups", "-check=false")
	if code != ExitOK || !strings.Contains(out, "tiny-dups") {
		t.Fatalf("exit %d", code)
	}
	if g.requests.Load() != 20 {
		t.Errorf("fake received %d, want 20", g.requests.Load())
	}
	code, out, _ = runMain(t, "-list", "-workloads-file", file)
	if code != ExitOK || !strings.Contains(out, "storm") || !strings.Contains(out, "tiny-dups") {
		t.Errorf("-list: exit %d", code)
	}
}

func TestMainSetupErrors(t *testing.T) {
	t.Parallel()
	_, urls := startFake(t, 1, nil)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`[{"name":"x","concurency":3}]`), 0o644)
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no gates", nil, ExitUsage, "-gates is required"},
		{"unknown flag", []string{"-gates", urls[0], "-bogus"}, ExitUsage, "bogus"},
		{"extra argument", []string{"-gates", urls[0], "unique"}, ExitUsage, "unexpected argument"},
		{"unknown workload", []string{"-gates", urls[0], "-workload", "nope"}, ExitUsage, "unknown workload"},
		{"bad gate", []string{"-gates", "127.0.0.1:8080"}, ExitUsage, "invalid gates"},
		{"bad concurrency", []string{"-gates", urls[0], "-concurrency", "-3"}, ExitUsage, "invalid concurrency"},
		{"bad spread", []string{"-gates", urls[0], "-spread", "random"}, ExitUsage, "invalid spread"},
		{"zero bounds", []string{"-gates", urls[0], "-requests", "0"}, ExitUsage, "invalid duration"},
		{"bad workloads file", []string{"-gates", urls[0], "-workloads-file", bad}, ExitUsage, "concurency"},
		{"missing workloads file", []string{"-gates", urls[0], "-workloads-file", filepath.Join(dir, "none.json")}, ExitUsage, "no such file"},
		{"unreachable gate", []string{"-gates", deadURL(t), "-requests", "1"}, ExitSetup, "unreachable"},
		{"unwritable output", []string{"-gates", urls[0], "-requests", "1", "-out", filepath.Join(dir, "no", "r.json")}, ExitSetup, "-out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runMain(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, c.code, c.msg)
			}
		})
	}
	if code, _, _ := runMain(t, "-h"); code != ExitOK {
		t.Errorf("-h: exit %d", code)
	}
}
