package logging

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// HCLog returns an hclog.Logger (what hashicorp/raft takes) that writes every
// line to l. Levels map one to one (hclog Trace becomes LevelTrace); the hclog
// name goes into the KeyLogger attribute, With arguments become attributes,
// and a trailing odd argument is kept under KeyExtraValue as hclog does.
//
// The level filter is l's handler. SetLevel adds a second, stricter filter
// that is shared by every logger derived from this one (With, Named,
// ResetNamed), as the hclog contract asks; SetLevel(hclog.NoLevel) removes it.
func HCLog(l *slog.Logger, name string) hclog.Logger {
	return &hcLogger{l: OrDiscard(l), name: name, level: new(atomic.Int32)}
}

type hcLogger struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // hclog.Level set by SetLevel; NoLevel = handler decides
}

var _ hclog.Logger = (*hcLogger)(nil)

// SlogLevel maps an hclog level to the slog level it is logged at.
// hclog.NoLevel maps to Info; hclog.Off maps to a level above Error.
func SlogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	case hclog.Off:
		return slog.LevelError + 4
	default:
		return slog.LevelInfo
	}
}

func (h *hcLogger) enabled(level hclog.Level) bool {
	if level == hclog.Off {
		return false
	}
	if min := hclog.Level(h.level.Load()); min != hclog.NoLevel && level < min {
		return false
	}
	return h.l.Enabled(context.Background(), SlogLevel(level))
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	h.log(level, msg, args)
}

func (h *hcLogger) log(level hclog.Level, msg string, args []any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if !h.enabled(level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // runtime.Callers, log, the exported method
	r := slog.NewRecord(time.Now(), SlogLevel(level), msg, pcs[0])
	if h.name != "" {
		r.AddAttrs(slog.String(KeyLogger, h.name))
	}
	r.AddAttrs(hclogAttrs(args)...)
	_ = h.l.Handler().Handle(context.Background(), r)
}

func (h *hcLogger) Trace(msg string, args ...any) { h.log(hclog.Trace, msg, args) }
func (h *hcLogger) Debug(msg string, args ...any) { h.log(hclog.Debug, msg, args) }
func (h *hcLogger) Info(msg string, args ...any)  { h.log(hclog.Info, msg, args) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.log(hclog.Warn, msg, args) }
func (h *hcLogger) Error(msg string, args ...any) { h.log(hclog.Error, msg, args) }

func (h *hcLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcLogger) ImpliedArgs() []any {
	return append([]any(nil), h.implied...)
}

func (h *hcLogger) With(args ...any) hclog.Logger {
	c := *h
	c.l = slog.New(h.l.Handler().WithAttrs(hclogAttrs(args)))
	c.implied = append(append([]any(nil), h.implied...), args...)
	return &c
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *hcLogger) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }

// GetLevel returns the level set by SetLevel or, without one, the lowest
// level the handler accepts (Off if it accepts none).
func (h *hcLogger) GetLevel() hclog.Level {
	if l := hclog.Level(h.level.Load()); l != hclog.NoLevel {
		return l
	}
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.l.Enabled(context.Background(), SlogLevel(l)) {
			return l
		}
	}
	return hclog.Off
}

func (h *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	l := h.l
	if h.name != "" {
		l = l.With(KeyLogger, h.name)
	}
	w := &stdWriter{l: l, infer: opts.InferLevels, force: slog.LevelInfo}
	if opts.ForceLevel != hclog.NoLevel {
		w.forced = true
		w.force = SlogLevel(opts.ForceLevel)
	}
	return w
}

// hclogAttrs turns hclog's alternating key/value arguments into attributes,
// rendering hclog's value helpers (Fmt, Hex, Octal, Binary, Quote) as hclog does.
func hclogAttrs(args []any) []slog.Attr {
	if len(args) == 0 {
		return nil
	}
	attrs := make([]slog.Attr, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			attrs = append(attrs, slog.Any(KeyExtraValue, hclogValue(args[i])))
			break
		}
		attrs = append(attrs, slog.Any(fmt.Sprint(args[i]), hclogValue(args[i+1])))
	}
	return attrs
}

func hclogValue(v any) any {
	switch x := v.(type) {
	case hclog.Format:
		if len(x) == 0 {
			return ""
		}
		if f, ok := x[0].(string); ok {
			return fmt.Sprintf(f, x[1:]...)
		}
		return fmt.Sprint(x...)
	case hclog.Hex:
		return "0x" + strconv.FormatInt(int64(x), 16)
	case hclog.Octal:
		return "0" + strconv.FormatInt(int64(x), 8)
	case hclog.Binary:
		return "0b" + strconv.FormatInt(int64(x), 2)
	case hclog.Quote:
		return strconv.Quote(string(x))
	}
	return v
}
