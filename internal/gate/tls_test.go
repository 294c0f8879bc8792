package gate

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managertest"
)

// With GATE_TLS_CERT_FILE and GATE_TLS_KEY_FILE the gate serves HTTPS: a
// client that trusts the CA submits a job; plain HTTP gets no answer; a
// certificate rotated on disk is presented to new connections after a reload.
func TestGateServesHTTPS(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "gate.pem"), filepath.Join(dir, "gate.key")
	ca := certstest.NewCA(t)
	ca.Issue(t, 100, cf, kf)
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TLSCertFile, cfg.TLSKeyFile = cf, kf })
	url := strings.Replace(tg.URL, "http://", "https://", 1)

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	post := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/jobs", strings.NewReader(`{"type":"demo"}`))
		req.Header.Set("Idempotency-Key", skey(1))
		return hc.Do(req)
	}
	resp, err := post()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 100 {
		t.Fatalf("over HTTPS: %d %s", resp.StatusCode, b)
	}

	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get(tg.URL + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served by a TLS gate")
		}
	}

	ca.Issue(t, 101, cf, kf)
	// File times are coarse (a kernel tick): make the change visible.
	future := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(cf, future, future)
	_ = os.Chtimes(kf, future, future)
	if loaded, err := tg.certs.Reload(); !loaded || err != nil { // as the watcher does every certReloadInterval
		t.Fatalf("reload: loaded %v, %v", loaded, err)
	}
	resp, err = post()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 101 || resp.StatusCode != http.StatusCreated {
		t.Fatalf("after the rotation: serial %d, status %d", got, resp.StatusCode)
	}
}

// A half-configured TLS (one file of two) or an unreadable pair stops the
// gate with a configuration error.
func TestGateTLSSettings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Managers = []string{"127.0.0.1:1"}
	cfg.TLSCertFile = "/some/cert.pem"
	if err := cfg.Validate(); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), EnvTLSKeyFile) {
		t.Fatalf("cert without key: %v", err)
	}
	cfg.TLSCertFile, cfg.TLSKeyFile = "", "/some/key.pem"
	if err := cfg.Validate(); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), EnvTLSCertFile) {
		t.Fatalf("key without cert: %v", err)
	}
	cfg.TLSCertFile = filepath.Join(t.TempDir(), "none.pem")
	if _, err := New(cfg, Deps{}); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("a missing certificate: %v", err)
	}
}

// A reload of GATE_TLS_* that fails (a renewed certificate that does not
// match its key) keeps the certificate in use and is shown at /metrics:
// once_gate_tls_certificate_last_reload_successful{certificate="https"} 0,
// the time of the last load unchanged; a good pair after makes it 1 and
// moves the time.
func TestGateTLSFailedReloadIsShownAtMetrics(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "gate.pem"), filepath.Join(dir, "gate.key")
	ca := certstest.NewCA(t)
	ca.Issue(t, 100, cf, kf)
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TLSCertFile, cfg.TLSKeyFile = cf, kf })
	https := map[string]string{"certificate": "https", "node": "test-gate"}
	gauges := func() (ok, at float64) {
		t.Helper()
		return gaugeValue(t, tg.metrics.reg, "once_gate_tls_certificate_last_reload_successful", https),
			gaugeValue(t, tg.metrics.reg, "once_gate_tls_certificate_last_reload_success_timestamp_seconds", https)
	}
	ok, loadedAt := gauges()
	if ok != 1 || loadedAt == 0 {
		t.Fatalf("after the load at start: successful %v, loaded at %v", ok, loadedAt)
	}
	inUse := tg.certs.Certificate()
	future := time.Now().Add(time.Hour)
	touch := func() {
		future = future.Add(time.Second)
		for _, f := range []string{cf, kf} {
			if err := os.Chtimes(f, future, future); err != nil {
				t.Fatal(err)
			}
		}
	}
	ca.Issue(t, 101, cf, filepath.Join(t.TempDir(), "other.key"))
	touch()
	if _, err := tg.certs.Reload(); err == nil {
		t.Fatal("a certificate that does not match its key was loaded")
	}
	if ok, at := gauges(); ok != 0 || at != loadedAt || tg.certs.Certificate() != inUse {
		t.Fatalf("a failed reload: successful %v, loaded at %v (before %v); want 0, unchanged, the certificate kept", ok, at, loadedAt)
	}
	ca.Issue(t, 102, cf, kf)
	touch()
	if loaded, err := tg.certs.Reload(); !loaded || err != nil {
		t.Fatalf("a good pair: loaded %v, err %v", loaded, err)
	}
	if ok, at := gauges(); ok != 1 || at <= loadedAt {
		t.Fatalf("a good reload: successful %v, loaded at %v (before %v); want 1 and later", ok, at, loadedAt)
	}
}
