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
	// ErrJoin: no seed could be joined (see *JoinError).
	ErrJoin = errors.New("membership: join failed")
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
	var b strings.Builder
	b.WriteString("membership: invalid config ")
	b.WriteString(e.Field)
	if e.Value != "" {
		fmt.Fprintf(&b, "=%q", e.Value)
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
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
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
		if e.Value != "" {
			fmt.Fprintf(&b, "=%q", e.Value)
		}
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

func (e *MetaError) Unwrap() error { return e.Err }

// JoinError reports that none of Seeds could be joined. It matches ErrJoin.
type JoinError struct {
	Seeds []string
	Err   error // what memberlist said
}

func (e *JoinError) Error() string {
	return fmt.Sprintf("membership: join failed: none of %s answered: %v", strings.Join(e.Seeds, ","), e.Err)
}

func (e *JoinError) Unwrap() []error { return []error{ErrJoin, e.Err} }
