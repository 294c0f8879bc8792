package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A refused value that carries credentials (an OTLP endpoint given as
// https://user:password@collector, or such a URL mistyped) is shown without
// them: the error goes to stderr and the logs. The validator's own message
// may redact them; the *Error's Value must too.
func TestErrorWithholdsCredentialsOfARefusedValue(t *testing.T) {
	refuse := func(string) error { return ErrSyntax }
	for _, v := range []string{
		"https://user:hunter2@collector:4318",
		"http://hunter2@collector:4318/v1/traces",
		"http//user:hunter2@collector:4318", // the colon forgotten: not a URL with a user
		"http:/user:hunter2@collector",
		"user:hunter2@collector:4318",
	} {
		l := NewLoader("x", nil)
		var s string
		l.String(&s, "X_ENDPOINT", "a URL", refuse, "where")
		err := l.Parse(nil, MapLookup(map[string]string{"X_ENDPOINT": v}))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v, want ErrInvalid", v, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the password: %v", v, err)
		}
		if !strings.Contains(err.Error(), "collector") {
			t.Errorf("%q: the error no longer names the host: %v", v, err)
		}
		// A value set in code and checked (Check) is shown the same way.
		s = v
		if err := l.Check(); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Check of %q: %v", v, err)
		}
	}
	// Values without credentials are shown as given.
	l := NewLoader("x", nil)
	var s string
	l.String(&s, "X_ADDR", "an address", refuse, "where")
	err := l.Parse(nil, MapLookup(map[string]string{"X_ADDR": "10.0.0.1:7000"}))
	if err == nil || !strings.Contains(err.Error(), `"10.0.0.1:7000"`) {
		t.Fatalf("a value without credentials: %v", err)
	}
}

// The secret itself given where its file's path is wanted
// (X_SECRET_FILE=$(openssl rand -hex 32), a mix-up of X_SECRET and
// X_SECRET_FILE) is not repeated by the error, which goes to stderr and the
// logs. A path that names a file in a directory that exists is still shown.
func TestReadSecretFileWithholdsASecretGivenAsItsPath(t *testing.T) {
	for _, secret := range []string{
		"0123456789abcdef0123456789abcdef0123456789abcdef", // openssl rand -hex 24
		"q83vEjRXQ/2Pw1nB+Zk4c2h9YXh5Lk1wS0VtQWFCcnpNd1E=", // openssl rand -base64 32, with a '/'
	} {
		_, err := ReadSecretFile("X_SECRET_FILE", secret)
		if !errors.Is(err, ErrSecretFile) {
			t.Fatalf("%v, want ErrSecretFile", err)
		}
		if strings.Contains(err.Error(), secret[:16]) || strings.Contains(err.Error(), secret[len(secret)-16:]) {
			t.Errorf("the error repeats the secret given as the path: %v", err)
		}
	}
	missing := filepath.Join(t.TempDir(), "cluster-secret")
	if _, err := ReadSecretFile("X_SECRET_FILE", missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing file in a directory that exists: %v, want its path named", err)
	}
}

// A secret in base64 may begin with its only '/' (openssl rand -base64 32
// draws one such secret in about a hundred): given where its file's path is
// wanted, it names a file in the root, which exists. The error must not
// repeat it; a missing file in another directory that exists is still named.
func TestReadSecretFileWithholdsABase64SecretStartingWithASlash(t *testing.T) {
	secret := "/q83vEjRXQ2Pw1nB+Zk4c2h9YXh5Lk1wS0VtQWFCcnpNd1E="
	_, err := ReadSecretFile("X_SECRET_FILE", secret)
	if !errors.Is(err, ErrSecretFile) {
		t.Fatalf("%v, want ErrSecretFile", err)
	}
	if strings.Contains(err.Error(), secret[1:17]) {
		t.Errorf("the error repeats the secret given as the path: %v", err)
	}
	if got := ShownPath(secret); got == secret {
		t.Errorf("ShownPath shows the secret: %q", got)
	}
	missing := filepath.Join(t.TempDir(), "sub", "..", "cluster-secret")
	if got := ShownPath(missing); got != missing {
		t.Errorf("a missing file in a directory that exists: ShownPath %q, want it named", got)
	}
}
