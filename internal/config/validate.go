package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/once-dev/once/internal/logging"
)

// Validators shared by the gate and the manager. Each returns nil or an error
// saying what is wrong with the value; the Loader wraps it in an *Error that
// names the variable, the flag and the accepted form. Errors match ErrSyntax
// or ErrOutOfRange.

// Accepted forms, for the want argument of Loader.String and Invalid.
const (
	WantHostPort   = "a host:port with a port from 1 to 65535"
	WantListenAddr = "a TCP address host:port (empty host: every interface; port 0: a free port)"
	WantAdvertise  = "a host:port that others can dial, not 0.0.0.0 or [::] (empty: derived from the bind address)"
	WantName       = "1 to 64 characters of A-Z a-z 0-9 . _ -, starting with a letter or a digit"
	WantLogLevel   = "one of trace, debug, info, warn, error"
	WantLogFormat  = "text or json"
)

// MaxNameLen bounds datacenter names and node IDs.
const MaxNameLen = 64

// HostPort accepts host:port with a non-empty host and a port from 1 to
// 65535: an address to dial.
func HostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	if host == "" {
		return fmt.Errorf("%w: %q has no host", ErrSyntax, s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%w: %q: port is not a number from 1 to 65535", ErrOutOfRange, s)
	}
	return nil
}

// ListenAddr accepts host:port to bind: the host may be empty (every
// interface) and the port 0 (a free port).
func ListenAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%w: port %q is not a number from 0 to 65535", ErrOutOfRange, port)
	}
	return nil
}

// Advertise accepts "" (derive the address from the bind address) or a
// HostPort whose host is a name or a routable IP (not 0.0.0.0 or ::).
func Advertise(s string) error {
	if s == "" {
		return nil
	}
	if err := HostPort(s); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(s)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: %q is not routable", ErrOutOfRange, s)
	}
	return nil
}

// Name accepts datacenter names and node IDs: 1 to MaxNameLen characters of
// A-Z a-z 0-9 . _ -, the first a letter or a digit.
func Name(s string) error {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Errorf("%w: length %d is not from 1 to %d", ErrOutOfRange, len(s), MaxNameLen)
	}
	if !isAlnum(s[0]) {
		return fmt.Errorf("%w: %q does not start with a letter or a digit", ErrSyntax, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: character %q at offset %d is not allowed", ErrSyntax, c, i)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// LogLevel accepts the levels of logging.ParseLevel.
func LogLevel(s string) error {
	if _, err := logging.ParseLevel(s); err != nil {
		return fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	return nil
}

// LogFormat accepts the formats of logging.ValidateFormat.
func LogFormat(s string) error {
	if err := logging.ValidateFormat(s); err != nil {
		return fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	return nil
}

// OneOf returns a validator accepting exactly the given values.
func OneOf(values ...string) func(string) error {
	return func(s string) error {
		if slices.Contains(values, s) {
			return nil
		}
		return fmt.Errorf("%w: %q is not one of %q", ErrSyntax, s, values)
	}
}

// SamePort reports whether binding TCP listeners to a and b (ListenAddr
// values) would take the same port: both set to the same port other than 0
// (a free port each), on the same host or on hosts one of which is every
// interface ("", [::], or 0.0.0.0 against a host that is not an IPv6
// address). Hosts are compared as written: no name is resolved.
func SamePort(a, b string) bool {
	ha, pa, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	hb, pb, err := net.SplitHostPort(b)
	if err != nil || pa != pb || pa == "0" {
		return false
	}
	return ha == hb || everyInterface(ha, hb) || everyInterface(hb, ha)
}

// everyInterface reports whether a listener on host takes its port on
// other too.
func everyInterface(host, other string) bool {
	switch host {
	case "", "::":
		return true
	case "0.0.0.0":
		ip := net.ParseIP(other)
		return ip == nil || ip.To4() != nil
	}
	return false
}
