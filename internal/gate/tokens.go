package gate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
)

// ErrTokenFile is matched (errors.Is) by every error about the token file's
// content; such errors are *TokenFileError values.
var ErrTokenFile = errors.New("invalid token file")

// TokenFileError is a line of the token file that cannot be used.
type TokenFileError struct {
	Line   int    // 1-based; 0 for the file as a whole
	Reason string // what is wrong
}

func (e *TokenFileError) Error() string {
	if e.Line == 0 {
		return "token file: " + e.Reason
	}
	return fmt.Sprintf("token file line %d: %s", e.Line, e.Reason)
}

// Unwrap returns ErrTokenFile.
func (e *TokenFileError) Unwrap() error { return ErrTokenFile }

// Limits of the token file.
const (
	maxTokenLen  = 512
	maxTenantLen = 128
)

// tokenTable maps bearer tokens to tenants. Tokens are kept only as SHA-256
// digests: the lookup's timing depends on the digest, not on how much of a
// secret a guess shares, and a heap dump shows no token.
type tokenTable struct {
	byDigest map[[sha256.Size]byte]string
}

// tokenFiles are the gate's two token files, GATE_TOKEN_FILE (tenants)
// and GATE_OPERATOR_TOKEN_FILE (operators), and the tables last loaded from
// them. Both are loaded again when either file's content changes (Watch): a
// token added or revoked takes effect without a restart. The content, not
// the file's modification time and size, tells a change: a token replaced
// by another of the same length within one tick of the file system's clock
// (a revocation) changes neither. The two are loaded together, under one
// lock, because no token may be in both: an operator's token is no
// tenant's, and a tenant's token must not open the cluster view. A new pair
// that cannot be used (a file unreadable, a bad line, no token, a token in
// both) leaves the pair in use as it was, a token removed to revoke it
// still valid, and is logged and shown at /metrics; it is tried again at
// every look until it loads.
type tokenFiles struct {
	tenantPath, operatorPath string // "": that file is not configured
	log                      *slog.Logger
	cur                      atomic.Pointer[tokenTables]

	mu  sync.Mutex           // serialises reloads
	sum [2][sha256.Size]byte // the SHA-256 of each file's content last loaded

	// The outcome of the last look and when the files were last loaded, for
	// /metrics: a pair that cannot be used leaves the tokens loaded before
	// valid, a revoked one among them, so an operator must be able to alert
	// on it (once_gate_token_files_last_reload_successful).
	lastOK     atomic.Bool
	lastLoaded atomic.Int64 // Unix nanoseconds
}

// tokenTables are the tables in use: tenants nil when GATE_TOKEN_FILE is not
// set (every request is tenant "default"), operators nil when
// GATE_OPERATOR_TOKEN_FILE is not set.
type tokenTables struct {
	tenants, operators *tokenTable
}

// maxTokenFileBytes bounds what is read of a token file: a longer one (a
// path given by mistake that does not end, such as a device) is refused
// rather than read until memory runs out.
const maxTokenFileBytes = 64 << 20

// openTokenFiles loads GATE_TOKEN_FILE at tenants and
// GATE_OPERATOR_TOKEN_FILE at operators ("" for a file not configured);
// errors as Reload's.
func openTokenFiles(tenants, operators string, log *slog.Logger) (*tokenFiles, error) {
	f := &tokenFiles{tenantPath: tenants, operatorPath: operators, log: log}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// tenants reports whether the gate authenticates tenants (GATE_TOKEN_FILE
// is set); without, every request is tenant api.DefaultTenant.
func (f *tokenFiles) tenants() bool { return f != nil && f.tenantPath != "" }

// tenant returns the tenant of an Authorization header value among the
// tenants' tokens in use (false with no GATE_TOKEN_FILE).
func (f *tokenFiles) tenant(authorization string) (string, bool) {
	return f.cur.Load().tenants.tenant(authorization)
}

// operator returns the operator named by an Authorization header value
// among the operators' tokens in use (false with no GATE_OPERATOR_TOKEN_FILE).
func (f *tokenFiles) operator(authorization string) (string, bool) {
	return f.cur.Load().operators.tenant(authorization)
}

// Reload loads both files again if either's content changed since the last
// load, and reports whether it did. A pair in which a token is both a
// tenant's and an operator's is not loaded. On error the tables in use
// stay; the error is a *config.Error naming the file's variable (so it
// matches config.ErrInvalid) that wraps the cause (a *TokenFileError or the
// file system's error); a token in both files is GATE_TOKEN_FILE's error.
// The outcome is what lastReload reports.
func (f *tokenFiles) Reload() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	loaded, err := f.reload()
	f.lastOK.Store(err == nil)
	if loaded {
		f.lastLoaded.Store(time.Now().UnixNano())
	}
	return loaded, err
}

// lastReload reports whether the last look loaded the files or found them
// unchanged, and when they were last loaded.
func (f *tokenFiles) lastReload() (ok bool, loaded time.Time) {
	return f.lastOK.Load(), time.Unix(0, f.lastLoaded.Load())
}

// reload is Reload, under f.mu.
func (f *tokenFiles) reload() (bool, error) {
	sources := [2]tokenSource{
		{EnvTokenFile, "tenant", f.tenantPath},
		{EnvOperatorTokenFile, "operator", f.operatorPath},
	}
	var raw [2][]byte
	var sum [2][sha256.Size]byte
	for i, src := range sources {
		if src.path == "" {
			continue
		}
		b, err := readTokenFile(src.path)
		if err != nil {
			return false, src.fail(err)
		}
		raw[i], sum[i] = b, sha256.Sum256(b)
	}
	if f.cur.Load() != nil && sum == f.sum {
		return false, nil
	}
	var tables [2]*tokenTable
	for i, src := range sources {
		if src.path == "" {
			continue
		}
		t, err := parseTokens(bytes.NewReader(raw[i]))
		if err != nil {
			return false, src.fail(err)
		}
		tables[i] = t
	}
	if tables[0] != nil && tables[1] != nil {
		for d := range tables[0].byDigest {
			if _, shared := tables[1].byDigest[d]; shared {
				return false, sources[0].fail(&TokenFileError{
					Reason: "a token is also an operator's token of " + EnvOperatorTokenFile + " (an operator's token is no tenant's)"})
			}
		}
	}
	f.cur.Store(&tokenTables{tenants: tables[0], operators: tables[1]})
	f.sum = sum
	return true, nil
}

// readTokenFile reads the file at path, at most maxTokenFileBytes of it.
func readTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenFileBytes {
		return nil, &TokenFileError{Reason: fmt.Sprintf("longer than %d bytes", maxTokenFileBytes)}
	}
	return b, nil
}

// Watch reloads the files every interval until ctx ends, logging each
// reload and each pair that cannot be used (the tables in use then stay).
func (f *tokenFiles) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch loaded, err := f.Reload(); {
		case err != nil:
			f.log.Error("token files not reloaded; the tokens loaded before stay in use", logging.KeyError, err)
		case loaded:
			cur := f.cur.Load()
			f.log.Info("token files reloaded", logging.KeyCount, cur.tenants.len()+cur.operators.len())
		}
	}
}

// tokenSource is one token file: its variable, whom its lines name, its path.
type tokenSource struct{ env, holder, path string }

// fail is a *config.Error naming s's variable that wraps err.
func (s tokenSource) fail(err error) error {
	return &config.Error{Env: s.env, Flag: config.FlagName(s.env), Value: s.path,
		Want: "a readable file of '<token> <" + s.holder + ">' lines", Err: err}
}

// parseTokens reads the token file format: one "<token> <tenant>" pair per line,
// separated by spaces or tabs; blank lines and lines whose first non-blank
// character is '#' are ignored. A token is 1-512 characters of the RFC 6750
// b64token alphabet (A-Z a-z 0-9 - . _ ~ + / and trailing '='); a tenant is
// 1-128 characters of A-Z a-z 0-9 . _ -. A token may appear once; a tenant may
// have many tokens. A file with no token at all is an error: it would refuse
// every request.
func parseTokens(r io.Reader) (*tokenTable, error) {
	t := &tokenTable{byDigest: map[[sha256.Size]byte]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, &TokenFileError{Line: line, Reason: fmt.Sprintf("want '<token> <tenant>', got %d fields", len(fields))}
		}
		token, tenant := fields[0], fields[1]
		if err := validateToken(token); err != nil {
			return nil, &TokenFileError{Line: line, Reason: "token " + err.Error()}
		}
		if err := validateTenant(tenant); err != nil {
			return nil, &TokenFileError{Line: line, Reason: "tenant " + err.Error()}
		}
		d := sha256.Sum256([]byte(token))
		if _, dup := t.byDigest[d]; dup {
			return nil, &TokenFileError{Line: line, Reason: "token repeats an earlier line's token"}
		}
		t.byDigest[d] = tenant
	}
	if err := sc.Err(); err != nil {
		return nil, &TokenFileError{Line: line + 1, Reason: err.Error()}
	}
	if len(t.byDigest) == 0 {
		return nil, &TokenFileError{Reason: "no '<token> <tenant>' line"}
	}
	return t, nil
}

// len is the number of tokens of t (0 for nil).
func (t *tokenTable) len() int {
	if t == nil {
		return 0
	}
	return len(t.byDigest)
}

// tenant returns the tenant (or, of the operators' table, the operator) of
// an Authorization header value ("Bearer <token>", the scheme matched
// case-insensitively), and false if it names no known token or t is nil
// (its file is not configured).
func (t *tokenTable) tenant(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(authorization, " ")
	if t == nil || !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return "", false
	}
	tenant, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return tenant, ok
}

func validateToken(s string) error {
	if len(s) > maxTokenLen {
		return fmt.Errorf("is %d characters long (at most %d)", len(s), maxTokenLen)
	}
	body := strings.TrimRight(s, "=")
	if body == "" {
		return errors.New("is empty or only '='")
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if isNameChar(c) || strings.IndexByte("~+/", c) >= 0 {
			continue
		}
		return fmt.Errorf("has %q at offset %d (want A-Z a-z 0-9 - . _ ~ + / and trailing =)", c, i)
	}
	return nil
}

func validateTenant(s string) error {
	if s == "" || len(s) > maxTenantLen {
		return fmt.Errorf("is %d characters long (want 1 to %d)", len(s), maxTenantLen)
	}
	for i := 0; i < len(s); i++ {
		if !isNameChar(s[i]) {
			return fmt.Errorf("has %q at offset %d (want A-Z a-z 0-9 . _ -)", s[i], i)
		}
	}
	return nil
}

// isNameChar reports whether c is in the alphabet of tenants: A-Z a-z 0-9 . _ -.
func isNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
