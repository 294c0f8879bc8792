package logging

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"time"
)

// StdLogger returns a *log.Logger (what hashicorp/memberlist takes) whose
// lines go to l with KeyComponent=component. Each line's level comes from its
// prefix, as memberlist and raft's network layer write them:
//
//	[TRACE] [DEBUG] [INFO] [WARN] [WARNING] [ERR] [ERROR]
//
// A line without one is logged at Info. The prefix is stripped, and a leading
// "name: " (memberlist writes "[DEBUG] memberlist: Stream connection ...") is
// moved into the KeySubsystem attribute.
func StdLogger(l *slog.Logger, component string) *log.Logger {
	return log.New(&stdWriter{l: withComponent(l, component), infer: true, force: slog.LevelInfo}, "", 0)
}

// ErrorLog returns the *log.Logger for an http.Server's ErrorLog (both
// daemons use it): its lines (TLS handshake failures, broken connections,
// panics in handlers) are logged at Warn with KeyComponent=component; a
// [LEVEL] prefix is stripped, not obeyed.
func ErrorLog(l *slog.Logger, component string) *log.Logger {
	return log.New(&stdWriter{l: withComponent(l, component), forced: true, force: slog.LevelWarn}, "", 0)
}

// withComponent is l (or Discard() when nil) with KeyComponent=component,
// unless component is empty.
func withComponent(l *slog.Logger, component string) *slog.Logger {
	l = OrDiscard(l)
	if component != "" {
		l = l.With(KeyComponent, component)
	}
	return l
}

// stdWriter receives one line per Write from a *log.Logger.
type stdWriter struct {
	l      *slog.Logger
	infer  bool       // parse a [LEVEL] prefix
	forced bool       // use force whatever the prefix says (the prefix is still stripped)
	force  slog.Level // level when forced, or when no prefix is found
}

var levelPrefixes = []struct {
	prefix string
	level  slog.Level
}{
	{"[TRACE]", LevelTrace},
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[WARNING]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

// parseStdLine splits "[WARN] memberlist: text" into its level, subsystem and
// message. ok is false when the line carries no known level prefix.
func parseStdLine(line string) (level slog.Level, subsystem, msg string, ok bool) {
	msg = strings.TrimLeft(line, " \t")
	for _, p := range levelPrefixes {
		if strings.HasPrefix(msg, p.prefix) {
			level, ok = p.level, true
			msg = strings.TrimLeft(msg[len(p.prefix):], " \t")
			break
		}
	}
	if !ok {
		return slog.LevelInfo, "", line, false
	}
	if i := strings.Index(msg, ": "); i > 0 && i <= 32 && isSubsystem(msg[:i]) {
		subsystem, msg = msg[:i], msg[i+2:]
	}
	return level, subsystem, msg, true
}

// isSubsystem reports whether s is all of a-z, 0-9, '-', '_' and '.'.
func isSubsystem(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && !strings.ContainsRune("-_.", r)
	})
}

func (w *stdWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\r\n")
	level, subsystem, msg, ok := w.force, "", line, false
	if w.infer || w.forced {
		level, subsystem, msg, ok = parseStdLine(line)
	}
	if !ok || w.forced {
		level = w.force
	}
	ctx := context.Background()
	if !w.l.Enabled(ctx, level) {
		return len(p), nil
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	if subsystem != "" {
		r.AddAttrs(slog.String(KeySubsystem, subsystem))
	}
	_ = w.l.Handler().Handle(ctx, r)
	return len(p), nil
}
