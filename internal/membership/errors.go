package membership

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error the package returns wraps one of them; match
// with errors.Is.
var (
	// ErrInvalidConfig: Config.Validate refused a field (see *ConfigError).
	ErrInvalidConfig = errors.New("membership: invalid config")
	// ErrInvalidMeta: a Meta field is missing or malformed (see *MetaError).
	ErrInvalidMeta = errors.New("membership: invalid meta")
	// ErrMetaTooLarge: the encoded Meta exceeds MaxMetaSize.
	ErrMetaTooLarge = errors.New("membership: meta too large")
	// ErrMetaFormat: the encoded Meta uses a format this version does not know.
	ErrMetaFormat = errors.New("membership: unknown meta format")
	// ErrMetaCorrupt: the encoded Meta is truncated or malformed.
	ErrMetaCorrupt = errors.New("membership: corrupt meta")
	// ErrInvalidKey: a gossip key is not base64 or not 16, 24 or 32 bytes.
	ErrInvalidKey = errors.New("membership: invalid gossip key")
	// ErrNoEncryption: a keyring operation on a pool started without a key.
	ErrNoEncryption = errors.New("membership: gossip encryption is not enabled")
	// ErrKeyringOp: an unknown KeyringOp.
	ErrKeyringOp = errors.New("membership: unknown keyring operation")
	// ErrJoin: no seed could be joined (see *JoinError).
	ErrJoin = errors.New("membership: join failed")
	// ErrBroadcastTimeout: UpdateMeta or Leave could not confirm its broadcast in time.
	ErrBroadcastTimeout = errors.New("membership: broadcast not confirmed in time")
	// ErrLeft: the pool has left (Leave); it no longer publishes updates.
	ErrLeft = errors.New("membership: pool has left")
	// ErrShutdown: the pool has been shut down.
	ErrShutdown = errors.New("membership: pool is shut down")
)

// ConfigError names the Config field that Validate refused. It matches
// ErrInvalidConfig with errors.Is, and its cause (if any) too.
type ConfigError struct {
	Field  string // Config field, e.g. "BindPort" or "Meta.NodeID"
	Value  string // offending value, "" when absent or secret
	Reason string
	Err    error // cause, may be nil
}

func (e *ConfigError) Error() string {
	s := "membership: invalid config " + fieldDetail(e.Field, e.Value, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ConfigError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidConfig, e.Err}
	}
	return []error{ErrInvalidConfig}
}

// MetaError describes a Meta that could not be validated, encoded or decoded.
// Err is one of ErrInvalidMeta, ErrMetaTooLarge, ErrMetaFormat, ErrMetaCorrupt.
type MetaError struct {
	Field  string
	Value  string
	Reason string
	Err    error
}

func (e *MetaError) Error() string {
	if d := fieldDetail(e.Field, e.Value, e.Reason); d != "" {
		return e.Err.Error() + ": " + d
	}
	return e.Err.Error()
}

func (e *MetaError) Unwrap() error { return e.Err }

// fieldDetail is `field="value": reason`, the parts that are empty left out
// (the value also when there is no field).
func fieldDetail(field, value, reason string) string {
	var parts []string
	if field != "" {
		if value != "" {
			field += fmt.Sprintf("=%q", value)
		}
		parts = append(parts, field)
	}
	if reason != "" {
		parts = append(parts, reason)
	}
	return strings.Join(parts, ": ")
}

// JoinError reports that none of Seeds could be joined. It matches ErrJoin.
type JoinError struct {
	Seeds []string
	Err   error // what memberlist said
	// Label is the label of this node's pool ("once-lan/<datacenter>" or
	// "once-wan"). A seed of a pool of another label drops the connection
	// without a word, which memberlist reports as a bare EOF: the label in
	// the message says which pool the seeds must belong to.
	Label string
}

func (e *JoinError) Error() string {
	msg := fmt.Sprintf("membership: join failed: none of %s answered: %v", strings.Join(e.Seeds, ","), e.Err)
	if e.Label != "" {
		msg += fmt.Sprintf(" (this node's pool is %q; a seed of another pool, another datacenter's or the WAN pool, closes the connection: EOF)", e.Label)
	}
	return msg
}

func (e *JoinError) Unwrap() []error { return []error{ErrJoin, e.Err} }
