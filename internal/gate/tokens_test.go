package gate

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// A token revoked in the token file is refused once the gate has reloaded
// the file, without a restart; a token added is accepted. A file that cannot
// be used keeps the tokens loaded before.
func TestTokenFileReloadRevokesWithoutRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) {
		t.Helper()
		// Write beside and rename, as a deployment does: the reader never
		// sees a half-written file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("tok-alpha alpha\ntok-beta beta\n")
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = path })
	status := func(token string) int {
		return tg.get(t, "/v1/jobs/x", "Authorization", "Bearer "+token).status
	}
	if s := status("tok-alpha"); s == http.StatusUnauthorized {
		t.Fatal("tok-alpha refused before the reload")
	}

	// The watcher, as Serve runs it, at a test's pace.
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); tg.tokens.Watch(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-watched }()

	write("tok-beta beta\ntok-gamma gamma\n")
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return status("tok-alpha") == http.StatusUnauthorized, "tok-alpha refused after the reload"
	})
	wantProblem(t, tg.get(t, "/v1/jobs/x", "Authorization", "Bearer tok-alpha"), http.StatusUnauthorized, api.CodeUnauthorized)
	for _, tok := range []string{"tok-beta", "tok-gamma"} {
		if s := status(tok); s == http.StatusUnauthorized {
			t.Fatalf("%s refused after the reload", tok)
		}
	}

	// An invalid file is not loaded: the tokens in use stay.
	write("tok-delta\n")
	loaded, err := tg.tokens.Reload()
	if loaded || !errors.Is(err, config.ErrInvalid) || !errors.Is(err, ErrTokenFile) {
		t.Fatalf("reload of an invalid file: %v, %v; want a GATE_TOKEN_FILE error", loaded, err)
	}
	if s := status("tok-gamma"); s == http.StatusUnauthorized {
		t.Fatal("tok-gamma refused after an invalid file")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.tokens.Reload(); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("reload of a missing file: %v", err)
	}
	if s := status("tok-gamma"); s == http.StatusUnauthorized {
		t.Fatal("tok-gamma refused after the file was removed")
	}
}
