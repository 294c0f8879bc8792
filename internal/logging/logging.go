// Package logging builds the one log/slog handler every component of once
// writes to, and the adapters that route the libraries' own loggers into it:
// an hclog.Logger for hashicorp/raft (HCLog) and a *log.Logger for
// hashicorp/memberlist (StdLogger), whose "[WARN] memberlist: ..." prefixes
// become slog levels. Tests log through testutil.Logger, which sends
// everything to t.Log so that a passing test is quiet.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Attribute keys used across once: the one set every package logs with. Use
// these constants rather than string literals so that every component names
// the same thing the same way; an error is always under KeyError ("err").
const (
	KeyComponent   = "component"      // subsystem that logged: "raft", "memberlist", "autopilot", ...
	KeyLogger      = "logger"         // hclog logger name (raft's Named loggers)
	KeySubsystem   = "subsystem"      // prefix found in a library's line ("memberlist" in "memberlist: ...")
	KeyError       = "err"            // an error value
	KeyFile        = "file"           // a file path (certificates, secrets)
	KeyNode        = "node"           // memberlist node name
	KeyNodeID      = "node_id"        // raft server ID of a manager
	KeyAddr        = "addr"           // a network address
	KeyDatacenter  = "dc"             // datacenter name
	KeyPeer        = "peer"           // the other side of an operation
	KeyState       = "state"          // a state name (member state, raft state)
	KeyCount       = "count"          // a number of things
	KeyExpect      = "expect"         // bootstrap_expect
	KeyServers     = "servers"        // a raft configuration
	KeyDuration    = "duration"       // how long something took or will wait
	KeyAttempt     = "attempt"        // retry number
	KeyReason      = "reason"         // why a decision was taken
	KeyIndex       = "index"          // a raft log index
	KeySnapIndex   = "snapshot_index" // the last log index a snapshot holds
	KeyEvent       = "event"          // an event type
	KeyRole        = "role"           // gate or manager
	KeyRaftState   = "has_raft_state"
	KeyVote        = "vote"         // a bootstrap vote fingerprint
	KeyEncrypted   = "encrypted"    // whether gossip is encrypted
	KeyProfile     = "profile"      // memberlist timing profile
	KeyVoters      = "voters"       // number of voters
	KeyAlive       = "alive"        // number of alive members or voters
	KeyClockOffset = "clock_offset" // a clock offset (a duration: their clock minus ours)
	KeyVariable    = "variable"     // an environment variable's name
	KeyNearest     = "did_you_mean" // the known name an unknown one probably misspells
	KeyExtraValue  = "EXTRA_VALUE_AT_END"

	// HTTP access and error logs (the gate's API, the manager's RPC listener).
	KeyMethod     = "method"          // HTTP method
	KeyPath       = "path"            // request path
	KeyRoute      = "route"           // the matched route pattern
	KeyStatus     = "status"          // HTTP status sent
	KeyCode       = "code"            // problem code sent (pkg/api.Code)
	KeyBytes      = "bytes"           // response body bytes
	KeyDurationMS = "duration_ms"     // request duration in milliseconds
	KeyRemote     = "remote"          // client address
	KeyPanic      = "panic"           // a recovered panic value
	KeyStack      = "stack"           // its stack
	KeyTenant     = "tenant"          // the tenant of a request or entry
	KeyIdemKey    = "idempotency_key" // an idempotency key
	KeyJobID      = "job_id"          // a job ID
	KeyOutcome    = "outcome"         // a submission's outcome
	KeyManagers   = "managers"        // manager RPC addresses
	KeyTerm       = "term"            // a raft term
	KeyDir        = "dir"             // a directory
	KeyOp         = "op"              // the operation that failed
	KeyRPCAddr    = "rpc"             // a manager's RPC address
	KeyRaftAddr   = "raft"            // a manager's Raft address
	KeyVersion    = "version"         // a format or protocol version
	KeyHolder     = "holder"          // who holds a claimed identity
	KeyRequeued   = "requeued"        // jobs put back in their queue
	KeyDead       = "dead"            // jobs that ran out of attempts

	// The Raft log store (internal/walstore).
	KeySegment      = "segment"       // a WAL segment file
	KeyOffset       = "offset"        // a byte offset in it
	KeyDroppedBytes = "dropped_bytes" // bytes of a torn tail dropped
	KeyKeptEntries  = "kept_entries"  // entries kept
	KeyLastIndex    = "last_index"    // the last log index
)

// LevelTrace is below slog.LevelDebug; hclog's Trace maps to it. Handlers
// built by New print it as "TRACE".
const LevelTrace = slog.LevelDebug - 4

// Output formats accepted by New and ValidateFormat.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// Errors returned by ParseLevel and ValidateFormat.
var (
	ErrUnknownLevel  = errors.New("logging: unknown level")
	ErrUnknownFormat = errors.New("logging: unknown format")
)

// New returns a logger writing to w in format "text" or "json" (anything else
// falls back to text: validate user input with ValidateFormat first) that drops
// records below level.
func New(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: ReplaceLevel}
	var h slog.Handler
	if strings.EqualFold(format, FormatJSON) {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h)
}

// ValidateFormat reports whether format is one New accepts.
func ValidateFormat(format string) error {
	switch strings.ToLower(format) {
	case FormatText, FormatJSON:
		return nil
	}
	return fmt.Errorf("%w: %q (accepted: text, json)", ErrUnknownFormat, format)
}

// ParseLevel parses trace, debug, info, warn (or warning) and error, in any
// case, as well as slog's offset forms such as "DEBUG+2"; white space around
// the value is ignored.
func ParseLevel(s string) (slog.Level, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "trace":
		return LevelTrace, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "err":
		return slog.LevelError, nil
	default:
		var l slog.Level
		if err := l.UnmarshalText([]byte(s)); err == nil {
			return l, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (accepted: trace, debug, info, warn, error)", ErrUnknownLevel, s)
}

// LevelName is the name New's handlers print for l.
func LevelName(l slog.Level) string {
	if l <= LevelTrace {
		if l == LevelTrace {
			return "TRACE"
		}
		return fmt.Sprintf("TRACE%d", l-LevelTrace)
	}
	return l.String()
}

// ReplaceLevel is the slog ReplaceAttr that names the trace levels (below
// debug) TRACE, TRACE-1, ... as every handler of this package does.
func ReplaceLevel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelDebug {
			return slog.String(slog.LevelKey, LevelName(l))
		}
	}
	return a
}

// Discard is a logger that drops everything; components use it when given a
// nil logger.
func Discard() *slog.Logger {
	return slog.New(slog.DiscardHandler)
}

// OrDiscard returns l, or Discard() when l is nil.
func OrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return Discard()
	}
	return l
}
