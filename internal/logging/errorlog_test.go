package logging

import (
	"bytes"
	"log/slog"
	"testing"
)

// TestErrorLog: an http.Server's error lines are logged at Warn under the
// component, whatever prefix they carry; below the handler's level nothing
// is written.
func TestErrorLog(t *testing.T) {
	var buf bytes.Buffer
	l := ErrorLog(New(&buf, "json", slog.LevelInfo), "http")
	l.Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:1")
	l.Printf("[ERROR] prefixed line")
	recs := records(t, &buf)
	want := []string{"http: TLS handshake error from 127.0.0.1:1: EOF", "prefixed line"}
	if len(recs) != len(want) {
		t.Fatalf("records = %v", recs)
	}
	for i, msg := range want {
		if recs[i]["level"] != "WARN" || recs[i]["msg"] != msg || recs[i][KeyComponent] != "http" {
			t.Errorf("record %d = %v; want WARN %q under component http", i, recs[i], msg)
		}
	}

	buf.Reset()
	ErrorLog(New(&buf, "json", slog.LevelError), "http").Printf("http: dropped")
	if buf.Len() != 0 {
		t.Fatalf("logged below the handler's level: %s", buf.String())
	}
	ErrorLog(nil, "http").Printf("http: to nowhere") // a nil logger discards
}
