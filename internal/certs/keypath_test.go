package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/internal/config"
)

// The key itself given where its file's path is wanted
// (X_TLS_KEY_FILE="$(cat key.pem)", a mix-up of a value and its _FILE
// variable) is not repeated by the error, which goes to stderr and the
// logs: not by New, not by NewCluster, nor by LoadCluster's *config.Error.
func TestKeyGivenAsItsPathIsNotRepeated(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	cf, kf, caf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	ca.Issue(t, 1, cf, kf)
	ca.WriteCA(t, caf)
	b, err := os.ReadFile(kf)
	if err != nil {
		t.Fatal(err)
	}
	key := string(b)
	body := strings.Split(key, "\n")[1] // a line of the key's base64
	if _, err := New(cf, key, nil); err == nil || strings.Contains(err.Error(), body) {
		t.Errorf("New: %v", err)
	}
	if _, err := NewCluster(caf, cf, key, nil); err == nil || strings.Contains(err.Error(), body) {
		t.Errorf("NewCluster: %v", err)
	}
	files := config.TLSFiles{EnvCA: "X_TLS_CA_FILE", CA: caf, EnvCert: "X_TLS_CERT_FILE", Cert: cf, EnvKey: "X_TLS_KEY_FILE", Key: key}
	if _, err := LoadCluster(files, nil); err == nil || strings.Contains(err.Error(), body) {
		t.Errorf("LoadCluster: %v", err)
	}
	// A missing key file in a directory that exists is named.
	missing := filepath.Join(dir, "missing-key.pem")
	if _, err := New(cf, missing, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing key file: %v, want its path named", err)
	}
}
