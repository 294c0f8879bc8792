package testutil

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/once-dev/once/internal/logging"
)

// LogEnv names the environment variable that sets Logger's level
// (any ParseLevel value; default debug).
const LogEnv = "ONCE_TEST_LOG_LEVEL"

// Logger returns a logger that writes each record through t.Log, so it
// shows only for failing tests or with -v. Records logged after the test has
// finished (by a goroutine that outlived it) are dropped rather than making
// the testing package panic: the cut-off happens in a t.Cleanup registered
// here, so call Logger before starting the components that use it, and
// their own Cleanups (which run first) may still log.
func Logger(t testing.TB) *slog.Logger {
	t.Helper()
	level := slog.LevelDebug
	if s := os.Getenv(LogEnv); s != "" {
		if l, err := logging.ParseLevel(s); err == nil {
			level = l
		} else {
			t.Logf("%s: %v", LogEnv, err)
		}
	}
	w := &tbWriter{t: t}
	t.Cleanup(w.stop)
	h := slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return logging.ReplaceLevel(groups, a)
		},
	})
	return slog.New(h)
}

// tbWriter forwards one record per Write to t.Log until stop is called. The
// read lock makes stop wait for a t.Log in progress, so none can run after the
// test is complete.
type tbWriter struct {
	t    testing.TB
	mu   sync.RWMutex
	done bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
