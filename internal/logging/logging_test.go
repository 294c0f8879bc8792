package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// records decodes the JSON lines New wrote.
func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bad json line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestParseLevel(t *testing.T) {
	cases := []struct {
		in   string
		want slog.Level
	}{
		{"trace", LevelTrace}, {"DEBUG", slog.LevelDebug}, {"info", slog.LevelInfo},
		{"Warn", slog.LevelWarn}, {"warning", slog.LevelWarn}, {"error", slog.LevelError},
		{"err", slog.LevelError}, {"DEBUG+2", slog.LevelDebug + 2},
		// White space around a value is ignored in every form, the offset
		// ones too (" debug " was read, " DEBUG+2 " refused).
		{" info ", slog.LevelInfo}, {" DEBUG+2 ", slog.LevelDebug + 2},
	}
	for _, c := range cases {
		got, err := ParseLevel(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "loud", "inf"} {
		if _, err := ParseLevel(bad); !errors.Is(err, ErrUnknownLevel) {
			t.Errorf("ParseLevel(%q) error = %v; want ErrUnknownLevel", bad, err)
		}
	}
}

func TestNewFormats(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, "json", LevelTrace)
	l.Log(t.Context(), LevelTrace, "deep", KeyNode, "n1")
	l.Info("hello")
	recs := records(t, &buf)
	if len(recs) != 2 || recs[0]["level"] != "TRACE" || recs[0][KeyNode] != "n1" || recs[1]["msg"] != "hello" {
		t.Fatalf("json records = %v", recs)
	}

	buf.Reset()
	l = New(&buf, "text", slog.LevelWarn)
	l.Info("dropped")
	l.Warn("kept")
	if s := buf.String(); strings.Contains(s, "dropped") || !strings.Contains(s, "level=WARN msg=kept") {
		t.Fatalf("text output = %q", s)
	}
	if err := ValidateFormat("yaml"); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("ValidateFormat(yaml) = %v", err)
	}
	if err := ValidateFormat("JSON"); err != nil {
		t.Fatalf("ValidateFormat(JSON) = %v", err)
	}
}

func TestHCLogLevelsNamesAndArgs(t *testing.T) {
	var buf bytes.Buffer
	base := New(&buf, "json", LevelTrace)
	h := HCLog(base, "raft")

	h.Trace("t")
	h.Debug("d")
	h.Info("i", "k", 1)
	h.Warn("w", "err", errors.New("boom"))
	h.Error("e", "odd")
	h.Log(hclog.NoLevel, "nolevel")
	h.Log(hclog.Off, "never")
	h.Named("net").With("peer", "p1").Info("named", "fmt", hclog.Fmt("%d-%s", 7, "x"), "hex", hclog.Hex(255))
	h.ResetNamed("other").Info("reset")

	recs := records(t, &buf)
	want := []struct{ msg, level string }{
		{"t", "TRACE"}, {"d", "DEBUG"}, {"i", "INFO"}, {"w", "WARN"}, {"e", "ERROR"},
		{"nolevel", "INFO"}, {"named", "INFO"}, {"reset", "INFO"},
	}
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d: %v", len(recs), len(want), recs)
	}
	for i, w := range want {
		if recs[i]["msg"] != w.msg || recs[i]["level"] != w.level {
			t.Errorf("record %d = %v; want msg %q level %s", i, recs[i], w.msg, w.level)
		}
	}
	if recs[0][KeyLogger] != "raft" || recs[2]["k"] != float64(1) || recs[3]["err"] != "boom" ||
		recs[4][KeyExtraValue] != "odd" {
		t.Errorf("attributes wrong: %v", recs[:5])
	}
	if n := recs[6]; n[KeyLogger] != "raft.net" || n["peer"] != "p1" || n["fmt"] != "7-x" || n["hex"] != "0xff" {
		t.Errorf("named record = %v", n)
	}
	if recs[7][KeyLogger] != "other" {
		t.Errorf("reset record = %v", recs[7])
	}
}

func TestHCLogLevelGuards(t *testing.T) {
	var buf bytes.Buffer
	h := HCLog(New(&buf, "text", slog.LevelInfo), "x")
	if h.IsTrace() || h.IsDebug() || !h.IsInfo() || !h.IsWarn() || !h.IsError() {
		t.Fatal("guards do not follow the handler level")
	}
	if h.GetLevel() != hclog.Info {
		t.Fatalf("GetLevel = %v", h.GetLevel())
	}
	child := h.With("a", 1)
	h.SetLevel(hclog.Error) // shared with derived loggers
	if child.IsWarn() || !child.IsError() || child.GetLevel() != hclog.Error {
		t.Fatal("SetLevel did not reach a derived logger")
	}
	child.Warn("dropped")
	if buf.Len() != 0 {
		t.Fatalf("unexpected output %q", buf.String())
	}
	h.SetLevel(hclog.NoLevel)
	if !child.IsWarn() {
		t.Fatal("SetLevel(NoLevel) did not remove the filter")
	}
	if got := child.ImpliedArgs(); len(got) != 2 || got[0] != "a" {
		t.Fatalf("ImpliedArgs = %v", got)
	}
	if child.Name() != "x" {
		t.Fatalf("Name = %q", child.Name())
	}
}

func TestHCLogStandardLogger(t *testing.T) {
	var buf bytes.Buffer
	h := HCLog(New(&buf, "json", slog.LevelDebug), "raft")
	h.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERR] raft-net: failed to accept")
	h.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}).Print("[DEBUG] forced")
	h.StandardLogger(nil).Print("[ERR] not parsed")
	recs := records(t, &buf)
	if len(recs) != 3 {
		t.Fatalf("records = %v", recs)
	}
	if r := recs[0]; r["level"] != "ERROR" || r[KeySubsystem] != "raft-net" || r["msg"] != "failed to accept" || r[KeyLogger] != "raft" {
		t.Errorf("inferred = %v", r)
	}
	if r := recs[1]; r["level"] != "WARN" || r["msg"] != "forced" {
		t.Errorf("forced = %v", r)
	}
	if r := recs[2]; r["level"] != "INFO" || r["msg"] != "[ERR] not parsed" {
		t.Errorf("plain = %v", r)
	}
}

func TestStdLoggerParsesMemberlistPrefixes(t *testing.T) {
	var buf bytes.Buffer
	l := StdLogger(New(&buf, "json", slog.LevelDebug), "memberlist")
	l.Printf("[DEBUG] memberlist: Stream connection from=%s", "127.0.0.1:1")
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: %s)", "n2")
	l.Printf("[ERR] memberlist: Failed to send: %v", errors.New("x"))
	l.Printf("[ERR] Failed to shutdown transport: %v", "y")
	l.Printf("[INFO] memberlist: Marking n3 as failed")
	l.Printf("no prefix at all")
	l.Printf("[TRACE] dropped below debug")

	recs := records(t, &buf)
	want := []struct{ level, sub, msg string }{
		{"DEBUG", "memberlist", "Stream connection from=127.0.0.1:1"},
		{"WARN", "memberlist", "Refuting a suspect message (from: n2)"},
		{"ERROR", "memberlist", "Failed to send: x"},
		{"ERROR", "", "Failed to shutdown transport: y"},
		{"INFO", "memberlist", "Marking n3 as failed"},
		{"INFO", "", "no prefix at all"},
	}
	if len(recs) != len(want) {
		t.Fatalf("records = %v", recs)
	}
	for i, w := range want {
		r := recs[i]
		sub, _ := r[KeySubsystem].(string)
		if r["level"] != w.level || sub != w.sub || r["msg"] != w.msg || r[KeyComponent] != "memberlist" {
			t.Errorf("record %d = %v; want %+v", i, r, w)
		}
	}
}
