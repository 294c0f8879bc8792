package testutil

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/logging"
)

// fakeTB records Log calls and lets the test end the "test" early.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	lines    []string
	cleanups []func()
}

func (f *fakeTB) Helper()             {}
func (f *fakeTB) Cleanup(fn func())   { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(string, ...any) {}
func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	f.lines = append(f.lines, args[0].(string))
	f.mu.Unlock()
}
func (f *fakeTB) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}
func (f *fakeTB) count() (n int)        { f.mu.Lock(); n = len(f.lines); f.mu.Unlock(); return n }
func (f *fakeTB) line(i int) (s string) { f.mu.Lock(); s = f.lines[i]; f.mu.Unlock(); return s }

func TestLoggerDropsAfterCleanup(t *testing.T) {
	f := &fakeTB{}
	l := Logger(f)
	l.Info("during", logging.KeyNode, "n1", "time", time.Second) // a "time" attribute that is not the record's time
	if f.count() != 1 || !strings.Contains(f.line(0), "msg=during node=n1") {
		t.Fatalf("lines = %v", f.lines)
	}
	f.finish()
	l.Info("after")
	if f.count() != 1 {
		t.Fatalf("logged after cleanup: %v", f.lines)
	}
	// The real thing: a goroutine logging concurrently with the cleanup.
	real := Logger(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			real.Debug("concurrent")
		}
	}()
	<-done
}
