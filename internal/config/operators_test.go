package config

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestSecondsAsOperatorsWriteThem: every IDEMPOTENCY_*_SECONDS and *_TIMEOUT
// setting takes a decimal number of seconds, from the environment or the flag.
func TestSecondsAsOperatorsWriteThem(t *testing.T) {
	cases := []struct {
		env, value string
		get        func(Idempotency) time.Duration
		want       time.Duration
	}{
		{EnvPendingTTL, "60", func(c Idempotency) time.Duration { return c.PendingTTL }, 60 * time.Second},
		{EnvPendingTTL, "60.0", func(c Idempotency) time.Duration { return c.PendingTTL }, 60 * time.Second},
		{EnvPendingTTL, "0.5", func(c Idempotency) time.Duration { return c.PendingTTL }, 500 * time.Millisecond},
		{EnvPendingTTL, " 2.25 ", func(c Idempotency) time.Duration { return c.PendingTTL }, 2250 * time.Millisecond},
		{EnvCommittedTTL, "300.000", func(c Idempotency) time.Duration { return c.CommittedTTL }, 300 * time.Second},
		{EnvRejectedTTL, ".5", func(c Idempotency) time.Duration { return c.RejectedTTL }, 500 * time.Millisecond},
		{EnvCleanupInterval, "1.5", func(c Idempotency) time.Duration { return c.CleanupInterval }, 1500 * time.Millisecond},
		{EnvPendingWaitTimeout, "0.5", func(c Idempotency) time.Duration { return c.PendingWaitTimeout }, 500 * time.Millisecond},
		{EnvPendingWaitTimeout, "30.0", func(c Idempotency) time.Duration { return c.PendingWaitTimeout }, 30 * time.Second},
		// The edges of the ranges are in them.
		{EnvPendingTTL, "0.1", func(c Idempotency) time.Duration { return c.PendingTTL }, MinTTL},
		{EnvCommittedTTL, "2592000", func(c Idempotency) time.Duration { return c.CommittedTTL }, 30 * 24 * time.Hour},
		{EnvCleanupInterval, "3600", func(c Idempotency) time.Duration { return c.CleanupInterval }, time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			c, err := load(t, nil, map[string]string{tc.env: tc.value})
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.want {
				t.Fatalf("%s=%q: got %v, want %v", tc.env, tc.value, got, tc.want)
			}
			c, err = load(t, []string{"-" + FlagName(tc.env), tc.value}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.want {
				t.Fatalf("flag -%s=%q: got %v, want %v", FlagName(tc.env), tc.value, got, tc.want)
			}
		})
	}
}

// TestSecondsRejected: malformed and out-of-range seconds (and integers)
// stop with an *Error naming the variable and the range, matching its cause.
func TestSecondsRejected(t *testing.T) {
	cases := []struct {
		env, value string
		cause      error
		want       string
	}{
		{EnvPendingTTL, "-1", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "1e3", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "60s", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "0.05", ErrOutOfRange, "from 0.1 to 2592000"},
		{EnvCommittedTTL, "2592000.5", ErrOutOfRange, "from 0.1 to 2592000"},
		{EnvCleanupInterval, "0.5", ErrOutOfRange, "from 1 to 3600"},
		{EnvPendingWaitTimeout, "NaN", ErrSyntax, "from 0.1 to 3600"},
		{EnvPendingWaitTimeout, "99999999999999999999", ErrOutOfRange, "from 0.1 to 3600"},
		{EnvPendingTTL, "", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "+5", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "Inf", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "0x10", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "1e400", ErrSyntax, "from 0.1 to 2592000"},
		{EnvPendingTTL, "0.0999", ErrOutOfRange, "from 0.1 to 2592000"},
		{EnvCleanupInterval, "3600.5", ErrOutOfRange, "from 1 to 3600"},
		// An integer setting: a decimal too large for the integer is out
		// of range, as one too large for a duration is.
		{EnvMaxEntries, "99999999999999999999", ErrOutOfRange, "from 1 to 100000000"},
		{EnvMaxEntries, "-99999999999999999999", ErrOutOfRange, "from 1 to 100000000"},
		{EnvMaxEntries, "1.5", ErrSyntax, "from 1 to 100000000"},
		{EnvMaxEntries, "1e3", ErrSyntax, "from 1 to 100000000"},
		{EnvMaxEntries, "0x10", ErrSyntax, "from 1 to 100000000"},
	}
	for _, tc := range cases {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			_, err := load(t, nil, map[string]string{tc.env: tc.value})
			var ce *Error
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalid) || !errors.Is(err, tc.cause) {
				t.Fatalf("got %v, want an *Error matching ErrInvalid and %v", err, tc.cause)
			}
			if ce.Env != tc.env || !strings.Contains(err.Error(), tc.env) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not name %s and %q", err, tc.env, tc.want)
			}
		})
	}
}

// TestBoolsAsOperatorsWriteThem: booleans take true/false/1/0/yes/no/on/off
// in any case.
func TestBoolsAsOperatorsWriteThem(t *testing.T) {
	for v, want := range map[string]bool{
		"True": true, "on": true, "ON": true, "yes": true, "1": true, "TRUE": true,
		"False": false, "off": false, "No": false, "0": false, "false": false,
	} {
		c, err := load(t, nil, map[string]string{EnvWaitForPending: v})
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvWaitForPending, v, err)
		}
		if c.WaitForPending != want {
			t.Fatalf("%s=%q: got %v, want %v", EnvWaitForPending, v, c.WaitForPending, want)
		}
	}
	_, err := load(t, nil, map[string]string{EnvWaitForPending: "maybe"})
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), EnvWaitForPending) {
		t.Fatalf("got %v", err)
	}
}

// TestDurationTakesSeconds: Duration settings take a Go duration or a decimal
// number of seconds.
func TestDurationTakesSeconds(t *testing.T) {
	for v, want := range map[string]time.Duration{"250ms": 250 * time.Millisecond, "0.25": 250 * time.Millisecond, "2": 2 * time.Second, "1.5s": 1500 * time.Millisecond} {
		l := NewLoader("t", io.Discard)
		d := time.Second
		l.Duration(&d, "MANAGER_APPLY_TIMEOUT", 100*time.Millisecond, time.Minute, "t")
		if err := l.Parse(nil, MapLookup(map[string]string{"MANAGER_APPLY_TIMEOUT": v})); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if d != want {
			t.Fatalf("%q: got %v, want %v", v, d, want)
		}
	}
	for v, cause := range map[string]error{
		"61": ErrOutOfRange, "-1s": ErrOutOfRange, "1e3": ErrSyntax, "2 minutes": ErrSyntax,
		// Seconds too many for a duration are out of range, as they are
		// for a Seconds setting, not "malformed" because the Go-duration
		// form, tried next, does not read them either.
		"9223372037": ErrOutOfRange, "99999999999999999999": ErrOutOfRange,
	} {
		l := NewLoader("t", io.Discard)
		d := time.Second
		l.Duration(&d, "MANAGER_APPLY_TIMEOUT", 100*time.Millisecond, time.Minute, "t")
		err := l.Parse(nil, MapLookup(map[string]string{"MANAGER_APPLY_TIMEOUT": v}))
		if !errors.Is(err, cause) || !strings.Contains(err.Error(), "MANAGER_APPLY_TIMEOUT") {
			t.Fatalf("%q: got %v, want %v", v, err, cause)
		}
	}
}

// TestValidators: the shared validators accept and refuse what they document,
// with causes that errors.Is matches.
func TestValidators(t *testing.T) {
	cases := []struct {
		name  string
		f     func(string) error
		value string
		want  error // nil: accepted
	}{
		{"HostPort", HostPort, "m1:7100", nil},
		{"HostPort", HostPort, "[::1]:7100", nil},
		{"HostPort", HostPort, ":7100", ErrSyntax},
		{"HostPort", HostPort, "m1", ErrSyntax},
		{"HostPort", HostPort, "m1:0", ErrOutOfRange},
		{"HostPort", HostPort, "::1:7100", ErrSyntax}, // IPv6 without brackets
		{"HostPort", HostPort, "m1:65536", ErrOutOfRange},
		{"ListenAddr", ListenAddr, "::1:7100", ErrSyntax},
		{"ListenAddr", ListenAddr, "localhost", ErrSyntax},
		{"ListenAddr", ListenAddr, "[::]:7100", nil},
		{"Advertise", Advertise, "[::]:7000", ErrOutOfRange},
		{"Advertise", Advertise, ":7000", ErrSyntax},
		{"ListenAddr", ListenAddr, ":0", nil},
		{"ListenAddr", ListenAddr, "127.0.0.1:65536", ErrOutOfRange},
		{"Advertise", Advertise, "", nil},
		{"Advertise", Advertise, "10.0.0.1:7000", nil},
		{"Advertise", Advertise, "0.0.0.0:7000", ErrOutOfRange},
		{"Name", Name, "dc-1.east_2", nil},
		{"Name", Name, "", ErrOutOfRange},
		{"Name", Name, strings.Repeat("a", MaxNameLen+1), ErrOutOfRange},
		{"Name", Name, "-dc", ErrSyntax},
		{"Name", Name, "dc/1", ErrSyntax},
		{"LogLevel", LogLevel, "WARN", nil},
		{"LogLevel", LogLevel, "loud", ErrSyntax},
		{"LogFormat", LogFormat, "json", nil},
		{"LogFormat", LogFormat, "xml", ErrSyntax},
		{"OneOf", OneOf("lan", "local"), "local", nil},
		{"OneOf", OneOf("lan", "local"), "wan", ErrSyntax},
	}
	for _, tc := range cases {
		err := tc.f(tc.value)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s(%q) = %v, want %v", tc.name, tc.value, err, tc.want)
		}
	}
}

// TestSamePort: two bind addresses take the same TCP port when their ports
// are the same (not 0) and their hosts the same or one of them every
// interface.
func TestSamePort(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:7000", "127.0.0.1:7000", true},
		{":7000", "127.0.0.1:7000", true},
		{"0.0.0.0:7000", "10.0.0.1:7000", true},
		{"[::]:7000", "127.0.0.1:7000", true},
		{"m1:7000", "m1:7000", true},
		{"127.0.0.1:7000", "127.0.0.1:7100", false},
		{"127.0.0.1:7000", "127.0.0.2:7000", false},
		{"0.0.0.0:7000", "[::1]:7000", false}, // IPv4's every interface, not IPv6's
		{":0", ":0", false},                   // two free ports
		{"", "127.0.0.1:7000", false},         // not set
	} {
		if got := SamePort(tc.a, tc.b); got != tc.want {
			t.Errorf("SamePort(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := SamePort(tc.b, tc.a); got != tc.want {
			t.Errorf("SamePort(%q, %q) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

// TestInvalid: Validate's errors name the variable and its flag and match
// ErrInvalid and the cause.
func TestInvalid(t *testing.T) {
	err := error(Invalid("GATE_LISTEN_ADDR", "nope", WantListenAddr, ErrSyntax))
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrSyntax) {
		t.Fatalf("%v does not match ErrInvalid and ErrSyntax", err)
	}
	for _, w := range []string{"GATE_LISTEN_ADDR", "-gate-listen-addr", `"nope"`, WantListenAddr} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not name %q", err, w)
		}
	}
}
