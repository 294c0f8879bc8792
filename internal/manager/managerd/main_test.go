package managerd

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
)

// The daemon's tests check, as internal/manager's do, that nothing they
// started outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMainExitCodes: -h exits 0 listing the settings; a bad setting exits 2
// with a message naming it, before anything starts.
func TestMainExitCodes(t *testing.T) {
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, nil, io.Discard, &stderr); code != config.ExitOK {
		t.Fatalf("-h: exit %d", code)
	}
	for _, env := range []string{manager.EnvNodeID, manager.EnvApplyTimeout, config.EnvPendingTTL, manager.EnvLogFormat} {
		if !strings.Contains(stderr.String(), env) {
			t.Errorf("-h does not list %s", env)
		}
	}
	stderr.Reset()
	code := Main(context.Background(), nil, []string{"IDEMPOTENCY_PENDING_TTL_SECONDS=soon"}, io.Discard, &stderr)
	if code != config.ExitConfig || !strings.Contains(stderr.String(), "IDEMPOTENCY_PENDING_TTL_SECONDS") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestMainWarnsOfUnknownVariables: a MANAGER_* or IDEMPOTENCY_* variable that
// neither daemon reads is logged as ignored, with the setting it misspells,
// before anything starts; the gate's variables, which one environment may hold
// for both, are not. (The data directory is a file, so the manager stops right
// after.)
func TestMainWarnsOfUnknownVariables(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	env := []string{"MANAGER_INSECURE=true", "MANAGER_NODE_ID=m1", "MANAGER_DATA_DIR=" + notADir,
		"MANAGER_RPC_ADDR=127.0.0.1:1", "MANAGER_RAFT_ADDR=127.0.0.1:2",
		"MANAGER_JOB_RETENSION_SECONDS=600", "IDEMPOTENCY_LEDGER_MAX_ENTRESS=5", // misspelled
		"IDEMPOTENCY_MAX_TTL_SECONDS=60", "GATE_NODE_NAME=g1"} // the gate's
	if code := Main(context.Background(), nil, env, io.Discard, &stderr); code != config.ExitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, config.ExitFailure, stderr.String())
	}
	var got []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, `msg="unknown variable ignored"`) {
			got = append(got, line[strings.Index(line, "variable="):])
		}
	}
	want := []string{
		"variable=IDEMPOTENCY_LEDGER_MAX_ENTRESS did_you_mean=" + manager.EnvLedgerMaxEntries,
		"variable=MANAGER_JOB_RETENSION_SECONDS did_you_mean=" + manager.EnvJobRetention,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings %q, want %q; stderr:\n%s", got, want, stderr.String())
	}
}
