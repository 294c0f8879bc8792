package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func load(t *testing.T, args []string, env map[string]string) (Idempotency, error) {
	t.Helper()
	l := NewLoader("test", io.Discard)
	c := DefaultIdempotency()
	RegisterIdempotency(l, &c)
	err := l.Parse(args, MapLookup(env))
	return c, err
}

func TestIdempotencyDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c != DefaultIdempotency() {
		t.Fatalf("defaults: got %+v want %+v", c, DefaultIdempotency())
	}
	want := Idempotency{60 * time.Second, 300 * time.Second, 60 * time.Second, 100000, 10 * time.Second, true, 30 * time.Second}
	if c != want {
		t.Fatalf("contract defaults changed: %+v", c)
	}
}

func TestEnvFillsAndFlagWins(t *testing.T) {
	env := map[string]string{
		EnvPendingTTL:     "5",
		EnvCommittedTTL:   "7",
		EnvWaitForPending: "false",
		EnvMaxEntries:     "42",
	}
	c, err := load(t, []string{"-idempotency-committed-ttl-seconds", "9"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.PendingTTL != 5*time.Second || c.CommittedTTL != 9*time.Second || c.WaitForPending || c.MaxEntries != 42 {
		t.Fatalf("got %+v", c)
	}
}

func TestInvalidNamesVariableAndRange(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"env not a number", nil, map[string]string{EnvPendingTTL: "soon"}, []string{EnvPendingTTL, "-idempotency-pending-ttl-seconds", "from 0.1 to 2592000"}},
		{"env zero", nil, map[string]string{EnvMaxEntries: "0"}, []string{EnvMaxEntries, "from 1 to 100000000"}},
		{"env negative", nil, map[string]string{EnvCleanupInterval: "-1"}, []string{EnvCleanupInterval}},
		{"bad bool", nil, map[string]string{EnvWaitForPending: "maybe"}, []string{EnvWaitForPending, "true or false"}},
		{"flag bad", []string{"-idempotency-pending-wait-timeout", "x"}, nil, []string{EnvPendingWaitTimeout}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.args, tc.env)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want *Error, got %T", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not name %q", err.Error(), w)
				}
			}
		})
	}
}

func TestUnexpectedArgument(t *testing.T) {
	if _, err := load(t, []string{"extra"}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
}

func TestListAndString(t *testing.T) {
	l := NewLoader("t", io.Discard)
	var seeds []string
	name := "g1"
	l.List(&seeds, "GATE_JOIN", "host:port list", func(s string) error {
		if !strings.Contains(s, ":") {
			return errors.New("missing port")
		}
		return nil
	}, "seeds")
	l.String(&name, "GATE_NODE_NAME", "", nil, "name")
	if err := l.Parse(nil, MapLookup(map[string]string{"GATE_JOIN": "a:1, b:2,,"})); err != nil {
		t.Fatal(err)
	}
	if len(seeds) != 2 || seeds[0] != "a:1" || seeds[1] != "b:2" || name != "g1" {
		t.Fatalf("got %v %q", seeds, name)
	}
	l2 := NewLoader("t", io.Discard)
	l2.List(&seeds, "GATE_JOIN", "host:port list", func(s string) error {
		if !strings.Contains(s, ":") {
			return errors.New("missing port")
		}
		return nil
	}, "seeds")
	err := l2.Parse(nil, MapLookup(map[string]string{"GATE_JOIN": "nope"}))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "GATE_JOIN") || !strings.Contains(err.Error(), "missing port") {
		t.Fatalf("got %v", err)
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  0123456789abcdef0123\n")
	if s, err := ReadSecretFile("X_SECRET_FILE", good); err != nil || s != "0123456789abcdef0123" {
		t.Fatalf("good file: %q %v", s, err)
	}
	// Every printable ASCII character, inner spaces included, and a CRLF
	// line end.
	printable := write("printable", "!\"#$%&'()*+,-./0123456789:;<=>?@AZ[\\]^_`az{|}~ x\r\n")
	if s, err := ReadSecretFile("X_SECRET_FILE", printable); err != nil || !strings.HasSuffix(s, "~ x") {
		t.Fatalf("printable file: %q %v", s, err)
	}
	for name, path := range map[string]string{
		"missing": filepath.Join(dir, "nope"),
		"short":   write("short", "tooshort\n"),
		"empty":   write("empty", "\n"),
		"long":    write("long", strings.Repeat("x", MaxSecretBytes+1)),
		// Not printable ASCII: it could travel in no Authorization header
		// nor gRPC metadata, and every call would fail after a clean start.
		"binary":    write("binary", "0123456789abcdef\x00\x01\xfe\xff0123456789abcdef"),
		"two lines": write("two-lines", "0123456789abcdef\n0123456789abcdef\n"),
		"non-ASCII": write("non-ascii", "0123456789abcdéf0123456789abcdef"),
		"a tab":     write("tab", "0123456789abcdef\t0123456789abcdef"),
	} {
		_, err := ReadSecretFile("X_SECRET_FILE", path)
		if !errors.Is(err, ErrSecretFile) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "X_SECRET_FILE") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A secret path that does not end (a device such as /dev/urandom given by
// mistake, a pipe whose writer stays) is refused once past MaxSecretBytes,
// not read until memory runs out or forever. The pipe's writer writes more
// than the bound and then holds its end open until the read has returned:
// a read to the end would never return.
func TestReadSecretFileRefusesAnEndlessFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			wrote <- err
			return
		}
		// Within the pipe's buffer: the writes return before any read.
		_, err = w.Write([]byte(strings.Repeat("x", 2*MaxSecretBytes)))
		<-read
		_ = w.Close()
		wrote <- err
	}()
	_, err := ReadSecretFile("X_SECRET_FILE", fifo)
	close(read)
	if werr := <-wrote; werr != nil {
		t.Fatal(werr)
	}
	if !errors.Is(err, ErrSecretFile) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a pipe that does not end: %v", err)
	}
}

// TestCheckAsParse: Check reports a value set in code with the same *Error
// as Parse reports the same value given as text, for every kind of setting;
// registering keeps the value a field holds (its default).
func TestCheckAsParse(t *testing.T) {
	type fields struct {
		n     int
		n64   int64
		secs  time.Duration
		dur   time.Duration
		name  string
		seeds []string
	}
	register := func(l *Loader, f *fields) {
		l.Int(&f.n, "T_INT", 1, 9, "n")
		l.Int64(&f.n64, "T_INT64", 1, 9, "n64")
		l.Seconds(&f.secs, "T_SECONDS", MinTTL, time.Minute, "secs")
		l.Duration(&f.dur, "T_DURATION", time.Millisecond, time.Second, "dur")
		l.String(&f.name, "T_NAME", WantName, Name, "name")
		l.List(&f.seeds, "T_SEEDS", "", HostPort, "seeds")
	}
	good := fields{n: 3, n64: 4, secs: time.Second, dur: 250 * time.Millisecond, name: "dc1", seeds: []string{"a:1"}}
	f := good
	l := NewLoader("t", io.Discard)
	register(l, &f)
	if err := l.Check(); err != nil || !reflect.DeepEqual(f, good) {
		t.Fatalf("registering changed %+v to %+v, or Check failed: %v", good, f, err)
	}
	for _, tc := range []struct {
		env, text string
		set       func(*fields)
		cause     error
	}{
		{"T_INT", "10", func(f *fields) { f.n = 10 }, ErrOutOfRange},
		{"T_INT64", "0", func(f *fields) { f.n64 = 0 }, ErrOutOfRange},
		{"T_SECONDS", "0.05", func(f *fields) { f.secs = 50 * time.Millisecond }, ErrOutOfRange},
		{"T_DURATION", "2s", func(f *fields) { f.dur = 2 * time.Second }, ErrOutOfRange},
		{"T_NAME", "dc/1", func(f *fields) { f.name = "dc/1" }, ErrSyntax},
		{"T_SEEDS", "a:1,b", func(f *fields) { f.seeds = []string{"a:1", "b"} }, ErrSyntax},
	} {
		f := good
		l := NewLoader("t", io.Discard)
		register(l, &f)
		parsed := l.Parse(nil, MapLookup(map[string]string{tc.env: tc.text}))
		f = good
		tc.set(&f)
		checked := l.Check()
		var ce *Error
		if !errors.As(checked, &ce) || ce.Env != tc.env || !errors.Is(checked, tc.cause) || !reflect.DeepEqual(checked, parsed) {
			t.Errorf("%s: Check() = %v, Parse of %q = %v; want the same *Error matching %v", tc.env, checked, tc.text, parsed, tc.cause)
		}
	}
}

// TestLoaderUnknown: a variable of the loader's prefixes that no setting reads
// is reported once, with the setting it most likely misspells; known names,
// the names another program reads and other prefixes are not.
// A refused flag is answered by its error alone: the listing of every
// setting is written for -h only, not after the error where it would bury it.
func TestUsageOnlyForHelp(t *testing.T) {
	for name, args := range map[string][]string{
		"a bad value":     {"-x-max-entries=many"},
		"out of range":    {"-x-max-entries=11"},
		"an unknown flag": {"-x-max-entires=3"},
		"no value":        {"-x-max-entries"},
	} {
		var out strings.Builder
		l := NewLoader("x", &out)
		var n int
		l.Int(&n, "X_MAX_ENTRIES", 1, 10, "entries")
		if err := l.Parse(args, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want an error matching ErrInvalid", name, err)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %q, want nothing besides the error", name, out.String())
		}
	}
	var out strings.Builder
	l := NewLoader("x", &out)
	var n int
	l.Int(&n, "X_MAX_ENTRIES", 1, 10, "entries")
	if err := l.Parse([]string{"-h"}, nil); !errors.Is(err, ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(out.String(), "Usage of x:") || !strings.Contains(out.String(), "-x-max-entries / X_MAX_ENTRIES") {
		t.Errorf("-h wrote %q, want the listing", out.String())
	}
}

func TestLoaderUnknown(t *testing.T) {
	l := NewLoader("test", io.Discard)
	var ttl time.Duration
	var n int
	l.Seconds(&ttl, "X_COMMITTED_TTL_SECONDS", time.Second, time.Hour, "ttl")
	l.Int(&n, "X_MAX_ENTRIES", 1, 10, "entries")
	environ := []string{
		"X_COMMITTED_TTL_SECONDS=5",  // known
		"X_COMMITED_TTL_SECONDS=5",   // one letter dropped
		"X_MAX_ENTIRES=3",            // two letters swapped
		"X_MAX_ENTIRES=4",            // the same name again
		"X_SOMETHING_ELSE=1",         // near nothing
		"X_OTHER_PROGRAMS_SETTING=1", // another program's
		"Y_COMMITED_TTL_SECONDS=5",   // another prefix
		"X_NO_VALUE",                 // no '=': still a name
		"X_OTHER_PROGRAMS_SETING=1",  // another program's, misspelt
	}
	got := l.Unknown(environ, []string{"X_"}, []string{"X_OTHER_PROGRAMS_SETTING"})
	want := []Unknown{
		{Name: "X_COMMITED_TTL_SECONDS", Nearest: "X_COMMITTED_TTL_SECONDS"},
		{Name: "X_MAX_ENTIRES", Nearest: "X_MAX_ENTRIES"},
		{Name: "X_NO_VALUE"},
		{Name: "X_OTHER_PROGRAMS_SETING", Nearest: "X_OTHER_PROGRAMS_SETTING"},
		{Name: "X_SOMETHING_ELSE"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Unknown = %+v, want %+v", got, want)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "abc", 0},
		{"", "abc", 3},
		{"abc", "abd", 1},
		{"abc", "acb", 1}, // a transposition is one edit
		{"COMMITTED", "COMMITED", 1},
		{"kitten", "sitting", 3},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

// A secret setting (a gossip key) that is refused never shows its value,
// given as a flag or in the environment: not in the error, and not in what
// the loader writes (the flag package's own "invalid value" line, the
// usage and its defaults).
func TestSecretSettingNeverShowsItsValue(t *testing.T) {
	const key = "s3cr3t-but-not-base64!"
	refuse := func(v string) error {
		if v != "" {
			return ErrSyntax
		}
		return nil
	}
	for name, given := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"flag":        {args: []string{"-x-gossip-key=" + key}},
		"flag, apart": {args: []string{"-x-gossip-key", key}},
		"environment": {env: map[string]string{"X_GOSSIP_KEY": key}},
	} {
		var out strings.Builder
		l := NewLoader("x", &out)
		v := ""
		l.Secret(&v, "X_GOSSIP_KEY", "a key", refuse, "the key")
		err := l.Parse(given.args, MapLookup(given.env))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v, want an error matching ErrInvalid", name, err)
		}
		if strings.Contains(err.Error(), key) || strings.Contains(out.String(), key) {
			t.Errorf("%s: the key is shown: error %q, output %q", name, err, out.String())
		}
	}
	// A default (a configuration built in code) is not shown by -h either.
	var out strings.Builder
	l := NewLoader("x", &out)
	v := key
	l.Secret(&v, "X_GOSSIP_KEY", "a key", nil, "the key")
	if err := l.Parse([]string{"-h"}, nil); !errors.Is(err, ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(out.String(), "X_GOSSIP_KEY") || strings.Contains(out.String(), key) {
		t.Errorf("-h: %q, want the setting without its value", out.String())
	}
}
