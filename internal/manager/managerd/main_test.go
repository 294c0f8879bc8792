package managerd

import (
	"bytes"
	"context"
	"io"
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
