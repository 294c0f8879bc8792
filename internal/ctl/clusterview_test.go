package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/gate"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// Tokens of startGate's gate.
const (
	tenantToken   = "tenant-token-1"
	operatorToken = "operator-token-9"
)

// startGate runs a real manager and a real gate in-process (the gate with a
// tenant's token and an operator's) and returns the gate's URL; both stop
// when the test ends.
func startGate(t *testing.T) string {
	t.Helper()
	c := managertest.Start(t, managertest.Options{})
	dir := t.TempDir()
	cfg := gate.DefaultConfig()
	cfg.ListenAddr, cfg.NodeName, cfg.Managers = "127.0.0.1:0", "ctl-gate", c.Addrs
	cfg.TokenFile, cfg.OperatorTokenFile = writeTemp(t, dir, "tokens", tenantToken+" acme\n"), writeTemp(t, dir, "operators", operatorToken+" ops\n")
	g, err := gate.New(cfg, gate.Deps{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gate.Serve: %v", err)
		}
		g.Close()
	})
	return "http://" + ln.Addr().String()
}

func writeTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// oncectl runs Main and returns its exit code, stdout and stderr.
func oncectl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := Main(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestClusterViewThroughAGate: cluster view asks a real gate for
// GET /v1/cluster with the operator's token from --operator-token-file (or
// ONCE_OPERATOR_TOKEN_FILE) and prints it as tables or, with -o json, as
// the gate's view; a tenant's token is refused (exit 1), an unreadable token
// file is a bad command line (exit 2).
func TestClusterViewThroughAGate(t *testing.T) {
	url := startGate(t)
	tokenFile := writeTemp(t, t.TempDir(), "operator-token", "\n"+operatorToken+"\n")

	code, out, errOut := oncectl(t, "--gates", url, "cluster", "view", "--operator-token-file", tokenFile)
	if code != ExitOK {
		t.Fatalf("cluster view: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"GATE", "ctl-gate", "dc1", "m1", "QUEUED", "BUDGET", "entries", "MANAGER", "Leader", "DATACENTER", "alive"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}

	t.Setenv(EnvOperatorTokenFile, tokenFile)
	code, out, errOut = oncectl(t, "--gates", url, "-o", "json", "cluster", "view")
	if code != ExitOK {
		t.Fatalf("cluster view -o json: exit %d: %s", code, errOut)
	}
	var v api.Cluster
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if v.Gate != "ctl-gate" || v.Datacenter != "dc1" || v.Leader == nil || v.Leader.NodeID != "m1" || len(v.Managers) != 1 ||
		len(v.Datacenters) != 1 {
		t.Fatalf("-o json: %+v", v)
	}

	t.Setenv(EnvOperatorTokenFile, "")
	if code, _, errOut := oncectl(t, "--gates", url, "--token", tenantToken, "cluster", "view"); code != ExitFailure ||
		!strings.Contains(errOut, string(api.CodeUnauthorized)) {
		t.Errorf("a tenant's token: exit %d, %s", code, errOut)
	}
	if code, _, errOut := oncectl(t, "--gates", url, "cluster", "view", "--operator-token-file", filepath.Join(t.TempDir(), "none")); code != ExitUsage {
		t.Errorf("a missing token file: exit %d, %s", code, errOut)
	}
	two := writeTemp(t, t.TempDir(), "two", "a b\n")
	if code, _, errOut := oncectl(t, "--gates", url, "cluster", "view", "--operator-token-file", two); code != ExitUsage {
		t.Errorf("a token file of two words: exit %d, %s", code, errOut)
	}
}

// TestJobWatchDefaultsToNamedDatacenters: without --datacenters, job watch
// follows every datacenter the job's submission named (named_datacenters),
// not only the copy it first read.
func TestJobWatchDefaultsToNamedDatacenters(t *testing.T) {
	const id = "j-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dc := r.URL.Query().Get("datacenter")
		if r.URL.Path != "/v1/jobs/"+id || dc == "dc2" {
			w.Header().Set("Content-Type", api.ContentTypeProblem)
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.Problem{Type: api.ProblemTypeBase + string(api.CodeJobNotFound), Status: http.StatusNotFound,
				Code: api.CodeJobNotFound, Detail: "no job"})
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_ = json.NewEncoder(w).Encode(api.Job{JobID: id, Status: api.JobStatusCommitted,
			Datacenters:      map[string]api.DatacenterStatus{"dc1": {Status: api.JobStatusCommitted}},
			NamedDatacenters: []string{"dc1", "dc2"}})
	}))
	defer srv.Close()
	code, out, errOut := oncectl(t, "--gates", srv.URL, "--timeout", "300ms", "job", "watch", id, "--interval", "50ms")
	if code != ExitFailure || !strings.Contains(out, "dc1=committed dc2=missing") {
		t.Fatalf("job watch: exit %d\n%s\n%s", code, out, errOut)
	}
}
