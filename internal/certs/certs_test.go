package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func serial(r *Reloader) int64 {
	c, err := x509.ParseCertificate(r.Certificate().Certificate[0])
	if err != nil {
		return -1
	}
	return c.SerialNumber.Int64()
}

func TestReloadOnChange(t *testing.T) {
	cf, kf, ca, r := loadedPair(t, t.TempDir())
	if loaded, err := r.Reload(); loaded || err != nil || serial(r) != 10 {
		t.Fatalf("reload without a change: loaded %v, err %v, serial %d", loaded, err, serial(r))
	}
	ca.Issue(t, 11, cf, kf)
	// The files' modification times must differ from the first load's.
	future := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(cf, future, future)
	_ = os.Chtimes(kf, future, future)
	if loaded, err := r.Reload(); !loaded || err != nil || serial(r) != 11 {
		t.Fatalf("reload after a change: loaded %v, err %v, serial %d", loaded, err, serial(r))
	}
	// A broken key keeps the certificate in use.
	if err := os.WriteFile(kf, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := future.Add(2 * time.Second)
	_ = os.Chtimes(kf, later, later)
	if loaded, err := r.Reload(); loaded || !errors.Is(err, ErrLoad) || serial(r) != 11 {
		t.Fatalf("reload of a broken pair: loaded %v, err %v, serial %d", loaded, err, serial(r))
	}
	got, _ := r.GetCertificate(&tls.ClientHelloInfo{})
	if got != r.Certificate() {
		t.Fatal("GetCertificate does not answer the current certificate")
	}
}

func TestNewRefusesAMismatchedPair(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	ca.Issue(t, 1, filepath.Join(dir, "a.pem"), filepath.Join(dir, "a.key"))
	ca.Issue(t, 2, filepath.Join(dir, "b.pem"), filepath.Join(dir, "b.key"))
	if _, err := New(filepath.Join(dir, "a.pem"), filepath.Join(dir, "b.key"), nil); !errors.Is(err, ErrLoad) {
		t.Fatalf("a certificate with another key: %v", err)
	}
	if _, err := New(filepath.Join(dir, "none.pem"), filepath.Join(dir, "a.key"), nil); !errors.Is(err, ErrLoad) {
		t.Fatalf("a missing certificate: %v", err)
	}
}
