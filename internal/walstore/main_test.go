package walstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logRecorder is a slog.Handler that writes every line to t.Log and keeps
// the records so that tests can assert on warnings.
type logRecorder struct {
	t     testing.TB
	attrs []slog.Attr
	mu    *sync.Mutex
	recs  *[]slog.Record
}

func newLogRecorder(t testing.TB) *logRecorder {
	return &logRecorder{t: t, mu: new(sync.Mutex), recs: new([]slog.Record)}
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.t.Log(b.String())
	h.mu.Lock()
	*h.recs = append(*h.recs, r)
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// find returns the attributes of the first record at level with message
// containing msg.
func (h *logRecorder) find(level slog.Level, msg string) (map[string]slog.Value, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.recs {
		if r.Level == level && strings.Contains(r.Message, msg) {
			attrs := map[string]slog.Value{}
			r.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value
				return true
			})
			return attrs, true
		}
	}
	return nil, false
}

// testLog is the entry the tests store at index i: every field set, sizes
// varying with i, so that a decoding mistake shows.
func testLog(i uint64) *raft.Log {
	l := &raft.Log{
		Index:      i,
		Term:       1 + i/7,
		Type:       raft.LogType(i % 6),
		Data:       bytes.Repeat([]byte{byte(i)}, int(i%23)+1),
		AppendedAt: time.Unix(1_700_000_000+int64(i), int64(i%1000)*1000+7),
	}
	if i%3 == 0 {
		l.Extensions = []byte(fmt.Sprintf("ext-%d", i))
	}
	return l
}

func testLogs(from, to uint64) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, testLog(i))
	}
	return logs
}

// open opens a store in dir with a recording logger and closes it at the
// end of the test.
func open(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(newLogRecorder(t))
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustStore(t testing.TB, s *Store, logs []*raft.Log) {
	t.Helper()
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs([%d..%d]): %v", logs[0].Index, logs[len(logs)-1].Index, err)
	}
}

// storeBatches stores [from, to] in batches of n.
func storeBatches(t testing.TB, s *Store, from, to, n uint64) {
	t.Helper()
	for i := from; i <= to; i += n {
		mustStore(t, s, testLogs(i, min(i+n-1, to)))
	}
}

func logsEqual(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.Equal(b.AppendedAt)
}

// checkRange asserts that s holds exactly [first, last] (0, 0 = empty), each
// entry equal to testLog, and nothing just outside.
func checkRange(t testing.TB, s *Store, first, last uint64) {
	t.Helper()
	gotFirst, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	gotLast, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	if gotFirst != first || gotLast != last {
		t.Fatalf("range = [%d, %d], want [%d, %d]", gotFirst, gotLast, first, last)
	}
	if last == 0 {
		return
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if want := testLog(i); !logsEqual(&l, want) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, l, *want)
		}
	}
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		var l raft.Log
		if err := s.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) outside [%d, %d] = %v, want raft.ErrLogNotFound", i, first, last, err)
		}
	}
}

// lastSegment returns the path of the store's last segment file.
func lastSegment(t testing.TB, dir string) string {
	t.Helper()
	segs, err := listSegments(filepath.Join(dir, segmentsDirName))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	return segs[len(segs)-1].path
}

func segmentCount(t testing.TB, dir string) int {
	t.Helper()
	segs, err := listSegments(filepath.Join(dir, segmentsDirName))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatalf("list segments: %v", err)
	}
	return len(segs)
}
