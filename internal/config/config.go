// Package config loads a process's settings the way etcd does: defaults in one
// place, flags on a FlagSet that is not global, the environment filling every flag
// that was not given on the command line, and validation that names the variable,
// the flag, the value and the accepted range.
//
// Every setting has an environment variable name (IDEMPOTENCY_*, GATE_*,
// MANAGER_*) and a flag derived from it: IDEMPOTENCY_PENDING_TTL_SECONDS is
// -idempotency-pending-ttl-seconds. A flag wins over its variable.
package config

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is matched (errors.Is) by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// Causes an *Error may carry besides the validators' own (errors.Is matches
// them through the *Error).
var (
	// ErrSyntax: the value is not of the setting's form.
	ErrSyntax = errors.New("malformed value")
	// ErrOutOfRange: the value is well formed but outside the accepted range.
	ErrOutOfRange = errors.New("out of range")
)

// Exit codes of both daemons (gate and manager), the same for every cause
// that leads to them.
const (
	// ExitOK: the process stopped cleanly (a signal, or -h).
	ExitOK = 0
	// ExitFailure: the process could not start (a port in use, a data
	// directory it cannot open) or stopped on an error.
	ExitFailure = 1
	// ExitConfig: a setting is invalid; the message on stderr names its
	// variable, its flag and the accepted range.
	ExitConfig = 2
)

// Invalid returns the *Error of a setting that failed to parse or validate
// (the Loader's, and the Validate methods' after parsing): env names the
// variable (the flag is derived), value is what was given, want the
// accepted range, and cause why (may be nil). It matches ErrInvalid and
// cause. A value that seems to carry credentials is shown without them
// (WithoutCredentials): the error goes to stderr and the logs.
func Invalid(env, value, want string, cause error) *Error {
	return &Error{Env: env, Flag: FlagName(env), Value: WithoutCredentials(value), Want: want, Err: cause}
}

// WithoutCredentials is v with what may be credentials replaced by "***":
// the user information of a URL (https://user:password@collector), and,
// since a refused value is often a mistyped one (http//user:password@host,
// user:password@host, which url.Parse does not take for a user), whatever
// comes before the last '@', from the first "//" on or from the start.
// A value without '@' is returned as it is.
func WithoutCredentials(v string) string {
	at := strings.LastIndexByte(v, '@')
	if at < 0 {
		return v
	}
	start := 0
	if i := strings.Index(v[:at], "//"); i >= 0 {
		start = i + 2
	}
	return v[:start] + "***" + v[at:]
}

// Error is a setting that failed to parse or validate. It names the environment
// variable and the flag, the value given, and the accepted range.
type Error struct {
	Env   string
	Flag  string
	Value string
	Want  string // the accepted range or form, e.g. "an integer from 1 to 86400"
	Err   error  // the underlying cause, if any
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("invalid %s (flag -%s): %q: want %s", e.Env, e.Flag, e.Value, e.Want)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap lets errors.Is match ErrInvalid and the cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// FlagName derives a flag name from an environment variable name.
func FlagName(env string) string {
	return strings.ReplaceAll(strings.ToLower(env), "_", "-")
}

// setting is one registered variable.
type setting struct {
	env, flag, usage string
	want             string             // the accepted range or form
	def              string             // the field's value when registered, for -h
	set              func(string) error // parses a raw value, checks it and stores it
	check            func() error       // checks the value the field holds
}

// Loader collects settings, then parses flags and the environment once, or
// checks the values a configuration built in code holds (Check).
type Loader struct {
	fs       *flag.FlagSet
	program  string
	usage    io.Writer // where -h writes the listing
	settings []*setting
	flagErr  error // the first typed error a flag's Set returned
}

// NewLoader returns a Loader whose FlagSet is named for the program. Output of
// -h goes to w.
func NewLoader(program string, w io.Writer) *Loader {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	// The flag package's own message of a refused flag ("invalid value
	// %q for flag ...") shows the value given, a secret's too: it is not
	// written. Parse returns the error, which the program prints (a
	// secret's without its value: Secret). The listing of the settings is
	// written to w for -h only: the flag package would write it after
	// every refused flag too, burying the one line that says what is wrong.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Loader{fs: fs, program: program, usage: w}
}

// writeUsage writes the listing of the settings, as -h shows it.
func (l *Loader) writeUsage() {
	w := l.usage
	fmt.Fprintf(w, "Usage of %s:\n\nEvery flag may also be set by its environment variable; a flag wins.\n\n", l.program)
	ss := append([]*setting(nil), l.settings...)
	sort.Slice(ss, func(i, j int) bool { return ss[i].env < ss[j].env })
	for _, s := range ss {
		fmt.Fprintf(w, "  -%s / %s (default %q)\n      %s; %s\n", s.flag, s.env, s.def, s.usage, s.want)
	}
}

// FlagSet exposes the underlying FlagSet, e.g. for boolean switches that have no
// environment variable.
func (l *Loader) FlagSet() *flag.FlagSet { return l.fs }

// flagValue adapts a setting to flag.Value.
// The flag package flattens a Set error into text, so the typed error is kept
// on the Loader and returned by Parse instead.
type flagValue struct {
	s *setting
	l *Loader
}

func (f flagValue) String() string { return "" }
func (f flagValue) Set(v string) error {
	err := f.s.set(v)
	if err != nil && f.l.flagErr == nil {
		f.l.flagErr = err
	}
	return err
}

// bind registers the setting env of the field at p, whose value now is its
// default. parse reads the text an operator gives (its error is the cause,
// e.g. ErrSyntax); valid (nil: any value) checks a value however it was
// given, parsed or set in code; format renders a value for -h and for the
// errors of Check. Both paths report the same *Error: the variable, its
// flag, the value, want and the cause.
func bind[T any](l *Loader, p *T, env, want, usage string, parse func(string) (T, error), valid func(T) error, format func(T) string) {
	s := &setting{env: env, flag: FlagName(env), usage: usage, want: want, def: format(*p)}
	s.set = func(text string) error {
		v, err := parse(text)
		if err == nil && valid != nil {
			err = valid(v)
		}
		if err != nil {
			return Invalid(env, text, want, err)
		}
		*p = v
		return nil
	}
	s.check = func() error {
		if valid == nil {
			return nil
		}
		if err := valid(*p); err != nil {
			return Invalid(env, format(*p), want, err)
		}
		return nil
	}
	if l.fs.Lookup(s.flag) != nil {
		panic("config: duplicate setting " + env)
	}
	l.settings = append(l.settings, s)
	l.fs.Var(flagValue{s: s, l: l}, s.flag, usage)
}

// within accepts the values from min to max; others are ErrOutOfRange.
func within[T cmp.Ordered](min, max T) func(T) error {
	return func(v T) error {
		if v < min || v > max {
			return ErrOutOfRange
		}
		return nil
	}
}

// Int registers an integer setting in [min, max].
func (l *Loader) Int(p *int, env string, min, max int, usage string) {
	integer(l, p, env, min, max, strconv.IntSize, usage)
}

// Int64 registers a 64-bit integer setting in [min, max].
func (l *Loader) Int64(p *int64, env string, min, max int64, usage string) {
	integer(l, p, env, min, max, 64, usage)
}

// integer registers a decimal integer setting in [min, max]; bitSize is
// T's, for strconv.ParseInt.
func integer[T int | int64](l *Loader, p *T, env string, min, max T, bitSize int, usage string) {
	bind(l, p, env, fmt.Sprintf("an integer from %d to %d", min, max), usage, func(v string) (T, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, bitSize)
		if errors.Is(err, strconv.ErrRange) {
			// Well formed, but beyond what T holds: as far out of
			// [min, max] as it gets.
			return 0, ErrOutOfRange
		}
		if err != nil {
			return 0, ErrSyntax
		}
		return T(n), nil
	}, within(min, max), func(n T) string { return strconv.FormatInt(int64(n), 10) })
}

// Seconds registers a duration given as a decimal number of seconds, as
// operators write it: 60, 60.0 or 0.5 (see ParseSeconds), in [min, max].
func (l *Loader) Seconds(p *time.Duration, env string, min, max time.Duration, usage string) {
	want := fmt.Sprintf("a number of seconds from %s to %s (decimals allowed: 0.5, 60.0)", FormatSeconds(min), FormatSeconds(max))
	bind(l, p, env, want, usage, ParseSeconds, within(min, max), FormatSeconds)
}

// Duration registers a duration in [min, max], written as a Go duration
// ("250ms", "2s") or as a decimal number of seconds ("0.25", "2").
func (l *Loader) Duration(p *time.Duration, env string, min, max time.Duration, usage string) {
	want := fmt.Sprintf("a duration from %s to %s (250ms, or 0.25 for seconds)", min, max)
	bind(l, p, env, want, usage, func(v string) (time.Duration, error) {
		d, err := ParseSeconds(v)
		if errors.Is(err, ErrOutOfRange) {
			return 0, err // seconds, more than a duration holds
		}
		if err != nil {
			d, err = time.ParseDuration(strings.TrimSpace(v))
		}
		if err != nil {
			return 0, ErrSyntax
		}
		return d, nil
	}, within(min, max), time.Duration.String)
}

// Bool registers a boolean setting: true/false, 1/0, yes/no, on/off (and t/f,
// y/n), in any case.
func (l *Loader) Bool(p *bool, env string, usage string) {
	bind(l, p, env, "true or false (also 1/0, yes/no, on/off, in any case)", usage, ParseBool, nil, strconv.FormatBool)
}

// String registers a string setting; validate (may be nil) checks it and its
// error is reported with want as the accepted form.
func (l *Loader) String(p *string, env, want string, validate func(string) error, usage string) {
	if want == "" {
		want = "a string"
	}
	bind(l, p, env, want, usage, func(v string) (string, error) { return v, nil }, validate,
		func(v string) string { return v })
}

// Secret registers a string setting that holds a secret (a gossip key): as
// String, but an error never shows the value given, which would put the
// secret, or something close to it, in the logs, nor does -h show its
// default.
func (l *Loader) Secret(p *string, env, want string, validate func(string) error, usage string) {
	l.String(p, env, want, validate, usage)
	s := l.settings[len(l.settings)-1]
	if s.def != "" {
		s.def = "(withheld)" // -h lists the default
	}
	set, check := s.set, s.check
	s.set = func(text string) error { return withheld(set(text)) }
	s.check = func() error { return withheld(check()) }
}

// withheld replaces the value an *Error shows with a placeholder.
func withheld(err error) error {
	var e *Error
	if errors.As(err, &e) {
		e.Value = "(withheld)"
	}
	return err
}

// List registers a comma-separated list; empty items are dropped. validate
// (may be nil) checks every item.
func (l *Loader) List(p *[]string, env, want string, validate func(string) error, usage string) {
	if want == "" {
		want = "a comma-separated list"
	}
	var valid func([]string) error
	if validate != nil {
		valid = func(items []string) error {
			for _, it := range items {
				if err := validate(it); err != nil {
					return err
				}
			}
			return nil
		}
	}
	bind(l, p, env, want, usage, func(v string) ([]string, error) { return SplitList(v), nil },
		valid, func(items []string) string { return strings.Join(items, ",") })
}

// SplitList splits a comma-separated list, trimming every item and dropping
// the empty ones (nil for none).
func SplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Check checks the value every registered field holds, in the order of
// registration, as Parse checks a value given: for a configuration built in
// code (the daemons' Validate). It returns the first *Error.
func (l *Loader) Check() error {
	for _, s := range l.settings {
		if err := s.check(); err != nil {
			return err
		}
	}
	return nil
}

// Unknown is a variable of the environment that no setting reads.
type Unknown struct {
	Name string
	// Nearest is the name of a setting that Name is most likely a
	// misspelling of (at most two letters added, dropped, changed or
	// swapped), or "" when none is that near.
	Nearest string
}

// Unknown returns, sorted by name, the variables of environ named with one of
// prefixes that no setting of l reads and that are not among also (the names
// of the same prefixes another program reads: the other daemon's
// IDEMPOTENCY_* variables, when one environment serves both). Parse ignores
// such a variable, so a misspelled one leaves its setting at the default in
// silence; the daemons log a warning for each.
// Nearest is sought among the settings of l and the names of also.
func (l *Loader) Unknown(environ []string, prefixes, also []string) []Unknown {
	known := make([]string, len(l.settings)) // in the order of registration
	for i, s := range l.settings {
		known[i] = s.env
	}
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(known, name) || slices.Contains(also, name) {
			continue
		}
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []Unknown
	for _, name := range slices.Compact(names) {
		u := Unknown{Name: name}
		best := maxMisspelling + 1
		// The other program's names are candidates too: a misspelling of
		// one of them (the gate's IDEMPOTENCY_MAX_TTL_SECONDS at a
		// manager) is named as such, by both programs.
		for _, env := range slices.Concat(known, also) {
			if d := editDistance(name, env); d < best {
				best, u.Nearest = d, env
			}
		}
		out = append(out, u)
	}
	return out
}

// maxMisspelling is the largest edit distance at which Unknown names a
// setting as the one a variable probably meant.
const maxMisspelling = 2

// editDistance is the optimal string alignment distance between a and b: the
// fewest single-byte insertions, deletions, substitutions and transpositions
// of neighbours that turn one into the other.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// ErrHelp is returned by Parse when -h or -help was given.
var ErrHelp = flag.ErrHelp

// Parse parses args, then fills every setting whose flag was not given from the
// environment (lookup is os.LookupEnv in production, a map in tests). It returns
// the first error; errors from settings are *Error and match ErrInvalid.
func (l *Loader) Parse(args []string, lookup func(string) (string, bool)) error {
	if err := l.fs.Parse(args); err != nil {
		if l.flagErr != nil {
			return l.flagErr
		}
		if errors.Is(err, flag.ErrHelp) {
			l.writeUsage()
			return ErrHelp
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if l.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrInvalid, l.fs.Arg(0))
	}
	given := map[string]bool{}
	l.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, s := range l.settings {
		if given[s.flag] || lookup == nil {
			continue
		}
		if v, ok := lookup(s.env); ok {
			if err := s.set(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// MapLookup adapts a map to the lookup function Parse takes (for tests).
func MapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// EnvList turns an os.Environ-style slice into a lookup function.
func EnvList(environ []string) func(string) (string, bool) {
	return MapLookup(pairs(environ))
}

// pairs maps the keys of key=value items to their values; an item without
// '=' is skipped.
func pairs(items []string) map[string]string {
	m := make(map[string]string, len(items))
	for _, kv := range items {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// maxSeconds is a generous upper bound for TTL-like settings (30 days).
const maxSeconds = 30 * 24 * 3600

// secondsRe is the form of a decimal number of seconds: digits with an
// optional fraction (60, 60.0, 0.5, .5). Signs, exponents and units are not
// accepted.
var secondsRe = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// ParseSeconds parses a decimal number of seconds as operators write it (60,
// 60.0, 0.5), rounded to the nanosecond. Errors match ErrSyntax (not a
// number) or ErrOutOfRange (longer than a time.Duration holds).
func ParseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if !secondsRe.MatchString(s) {
		return 0, fmt.Errorf("%w: %q is not a decimal number of seconds", ErrSyntax, s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", ErrSyntax, s, err)
	}
	if f > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("%w: %q seconds is longer than a duration holds", ErrOutOfRange, s)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// FormatSeconds renders d as the shortest decimal number of seconds that
// ParseSeconds reads back: 60, 0.5.
func FormatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// ParseBool parses a boolean as operators write it: true/false, 1/0, yes/no,
// on/off, t/f, y/n, in any case. Errors match ErrSyntax.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "yes", "y", "on":
		return true, nil
	case "0", "f", "false", "no", "n", "off":
		return false, nil
	}
	return false, fmt.Errorf("%w: %q is not a boolean", ErrSyntax, s)
}

// MaxSecretBytes bounds a secret file (the cluster secret).
const MaxSecretBytes = 4 << 10

// ErrSecretFile is matched by every error about a secret file (it also
// matches ErrInvalid: the process stops with ExitConfig).
var ErrSecretFile = fmt.Errorf("%w: secret file", ErrInvalid)

// ReadSecretFile reads a secret from path: the file's content without
// surrounding white space, at least 16 and at most MaxSecretBytes bytes, of
// printable ASCII (space to '~'). env names the variable that gave the path,
// for the message.
//
// A secret travels as "Authorization: Bearer <secret>" (an HTTP header, gRPC
// metadata) and the operator secret as gRPC metadata, neither of which can
// carry a control character or a byte above 0x7E: a binary secret (head -c
// 32 /dev/urandom) or one of several lines would let every process start
// and then fail every call between gates and managers ("unavailable"), so it
// is refused here, at start, instead.
func ReadSecretFile(env, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", env, ErrSecretFile, WithheldPath(path, err))
	}
	defer f.Close()
	// At most one byte past the bound: a path that never ends (/dev/urandom
	// given by mistake, a pipe) is refused, not read until memory runs out.
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", env, ErrSecretFile, err)
	}
	if len(b) > MaxSecretBytes {
		return "", fmt.Errorf("%s: %s: %w: longer than %d bytes", env, path, ErrSecretFile, MaxSecretBytes)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return "", fmt.Errorf("%s: %s: %w: want at least 16 characters (e.g. openssl rand -hex 32)", env, path, ErrSecretFile)
	}
	// The offset, never the byte: the message must not leak the secret.
	if i := strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r > '~' }); i >= 0 {
		return "", fmt.Errorf("%s: %s: %w: a byte at offset %d is not printable ASCII; want text on one line (e.g. openssl rand -hex 32)", env, path, ErrSecretFile, i)
	}
	return s, nil
}

// WithheldPath is err, the error of opening or reading path, without path
// unless ShownPath shows it: path may be the secret itself, given where its
// file's path is wanted (X_SECRET_FILE=$(openssl rand -hex 32), a key's PEM
// in X_TLS_KEY_FILE).
func WithheldPath(path string, err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) || ShownPath(path) == path {
		return err
	}
	return fmt.Errorf("%s %s: %w", pe.Op, ShownPath(path), pe.Err)
}

// ShownPath is path, to name in an error or a log line, or a placeholder
// when path may be a secret given where its file's path is wanted: when no
// file is there, and path has no directory part or one that does not
// exist. A path to a file that exists, or into a directory that exists
// other than the root, is shown: a secret in base64 (openssl rand -base64)
// may begin with its only '/', and so name a file in the root.
func ShownPath(path string) string {
	if _, err := os.Lstat(path); err == nil {
		return path
	}
	if strings.ContainsRune(path, '/') {
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() && dir != string(filepath.Separator) {
			return path
		}
	}
	return "(the path given, not shown: no file is there, nor a directory it names, and it may be the secret itself)"
}

// TLSFiles is the cluster TLS trio of a daemon (docs/security.md): the
// cluster CA, this node's certificate and its key, each named by its
// variable. All three or none must be set.
type TLSFiles struct {
	EnvCA, CA     string
	EnvCert, Cert string
	EnvKey, Key   string
}

// Set reports whether the trio is set (Check has passed).
func (f TLSFiles) Set() bool { return f.CA != "" }

// Check returns an *Error naming the first missing variable when some but
// not all three are set.
func (f TLSFiles) Check() error {
	if (f.CA == "") == (f.Cert == "") && (f.Cert == "") == (f.Key == "") {
		return nil // all three or none
	}
	want := "set with " + f.EnvCA + ", " + f.EnvCert + " and " + f.EnvKey + ", or none of them"
	for _, v := range [][2]string{{f.EnvCA, f.CA}, {f.EnvCert, f.Cert}, {f.EnvKey, f.Key}} {
		if v[1] == "" {
			return Invalid(v[0], "", want, nil)
		}
	}
	return nil
}
