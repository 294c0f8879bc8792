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
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is matched (errors.Is) by every validation error.
var ErrInvalid = errors.New("invalid configuration")

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
	set              func(string) error // parses and stores a raw value
	want             string
	def              string
}

// Loader collects settings, then parses flags and the environment once.
type Loader struct {
	fs       *flag.FlagSet
	settings []*setting
	byFlag   map[string]*setting
	flagErr  error // the first typed error a flag's Set returned
}

// NewLoader returns a Loader whose FlagSet is named for the program. Output of
// -h goes to w.
func NewLoader(program string, w io.Writer) *Loader {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(w)
	l := &Loader{fs: fs, byFlag: map[string]*setting{}}
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage of %s:\n\nEvery flag may also be set by its environment variable; a flag wins.\n\n", program)
		ss := append([]*setting(nil), l.settings...)
		sort.Slice(ss, func(i, j int) bool { return ss[i].env < ss[j].env })
		for _, s := range ss {
			fmt.Fprintf(w, "  -%s / %s (default %q)\n      %s; %s\n", s.flag, s.env, s.def, s.usage, s.want)
		}
	}
	return l
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

func (l *Loader) add(env, usage, def, want string, set func(string) error) {
	s := &setting{env: env, flag: FlagName(env), usage: usage, set: set, want: want, def: def}
	if _, dup := l.byFlag[s.flag]; dup {
		panic("config: duplicate setting " + env)
	}
	l.settings = append(l.settings, s)
	l.byFlag[s.flag] = s
	l.fs.Var(flagValue{s: s, l: l}, s.flag, usage)
}

// Int registers an integer setting in [min, max].
func (l *Loader) Int(p *int, env string, def, min, max int, usage string) {
	*p = def
	want := fmt.Sprintf("an integer from %d to %d", min, max)
	l.add(env, usage, strconv.Itoa(def), want, func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < min || n > max {
			return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want}
		}
		*p = n
		return nil
	})
}

// Int64 registers a 64-bit integer setting in [min, max].
func (l *Loader) Int64(p *int64, env string, def, min, max int64, usage string) {
	*p = def
	want := fmt.Sprintf("an integer from %d to %d", min, max)
	l.add(env, usage, strconv.FormatInt(def, 10), want, func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < min || n > max {
			return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want}
		}
		*p = n
		return nil
	})
}

// Seconds registers a duration given in whole seconds, in [min, max] seconds.
func (l *Loader) Seconds(p *time.Duration, env string, def, min, max int, usage string) {
	*p = time.Duration(def) * time.Second
	want := fmt.Sprintf("a whole number of seconds from %d to %d", min, max)
	l.add(env, usage, strconv.Itoa(def), want, func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < min || n > max {
			return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want}
		}
		*p = time.Duration(n) * time.Second
		return nil
	})
}

// Duration registers a Go duration ("250ms", "2s") in [min, max].
func (l *Loader) Duration(p *time.Duration, env string, def, min, max time.Duration, usage string) {
	*p = def
	want := fmt.Sprintf("a duration from %s to %s", min, max)
	l.add(env, usage, def.String(), want, func(v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < min || d > max {
			return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want}
		}
		*p = d
		return nil
	})
}

// Bool registers a boolean setting (true/false/1/0/yes/no/on/off).
func (l *Loader) Bool(p *bool, env string, def bool, usage string) {
	*p = def
	want := "true or false"
	l.add(env, usage, strconv.FormatBool(def), want, func(v string) error {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "t", "true", "yes", "y", "on":
			*p = true
		case "0", "f", "false", "no", "n", "off":
			*p = false
		default:
			return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want}
		}
		return nil
	})
}

// String registers a string setting; validate (may be nil) checks it and its
// error is reported with want as the accepted form.
func (l *Loader) String(p *string, env, def, want string, validate func(string) error, usage string) {
	*p = def
	if want == "" {
		want = "a string"
	}
	l.add(env, usage, def, want, func(v string) error {
		if validate != nil {
			if err := validate(v); err != nil {
				return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want, Err: err}
			}
		}
		*p = v
		return nil
	})
}

// List registers a comma-separated list; empty items are dropped.
func (l *Loader) List(p *[]string, env, def, want string, validate func(string) error, usage string) {
	parse := func(v string) []string {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	*p = parse(def)
	if want == "" {
		want = "a comma-separated list"
	}
	l.add(env, usage, def, want, func(v string) error {
		items := parse(v)
		for _, it := range items {
			if validate != nil {
				if err := validate(it); err != nil {
					return &Error{Env: env, Flag: FlagName(env), Value: v, Want: want, Err: err}
				}
			}
		}
		*p = items
		return nil
	})
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
		var ce *Error
		if errors.As(err, &ce) {
			return ce
		}
		if errors.Is(err, flag.ErrHelp) {
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
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return MapLookup(m)
}

// maxSeconds is a generous upper bound for TTL-like settings (30 days).
const maxSeconds = 30 * 24 * 3600
