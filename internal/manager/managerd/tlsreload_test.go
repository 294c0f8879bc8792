package managerd

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/certs/certstest"
)

// A reload of the cluster TLS files that fails (a renewed certificate that
// does not match its key) is shown at /metrics:
// once_manager_tls_certificate_last_reload_successful{certificate="cluster"}
// 0, the time of the last load unchanged; a good pair after makes it 1 and
// moves the time.
func TestClusterTLSReloadIsShownAtMetrics(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	caf, cf, kf := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	spec := func(serial int64) certstest.Spec {
		return certstest.Spec{Serial: serial, Server: true, Client: true, DNSNames: []string{certs.ServerName}}
	}
	ca.WriteCA(t, caf)
	ca.IssueFor(t, spec(1), cf, kf)
	c, err := certs.NewCluster(caf, cf, kf, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	registerTLSReloadMetrics(reg, c)
	gauges := func() (ok, at float64) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "certificate" || m.GetLabel()[0].GetValue() != "cluster" {
					t.Fatalf("%s: labels %v", f.GetName(), m.GetLabel())
				}
				switch f.GetName() {
				case "once_manager_tls_certificate_last_reload_successful":
					ok, found = m.GetGauge().GetValue(), found+1
				case "once_manager_tls_certificate_last_reload_success_timestamp_seconds":
					at, found = m.GetGauge().GetValue(), found+1
				}
			}
		}
		if found != 2 {
			t.Fatalf("%d of the two series", found)
		}
		return ok, at
	}
	ok, loadedAt := gauges()
	if ok != 1 || loadedAt == 0 {
		t.Fatalf("after the load at start: successful %v, loaded at %v", ok, loadedAt)
	}
	touch := func(at time.Time) {
		t.Helper()
		for _, f := range []string{cf, kf} {
			if err := os.Chtimes(f, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	at := time.Now().Add(time.Hour)
	ca.IssueFor(t, spec(2), cf, filepath.Join(t.TempDir(), "other-key.pem"))
	touch(at)
	if _, err := c.Reload(); err == nil {
		t.Fatal("a certificate that does not match its key was loaded")
	}
	if ok, got := gauges(); ok != 0 || got != loadedAt {
		t.Fatalf("a failed reload: successful %v, loaded at %v (before %v); want 0 and unchanged", ok, got, loadedAt)
	}
	ca.IssueFor(t, spec(3), cf, kf)
	touch(at.Add(time.Second))
	if loaded, err := c.Reload(); !loaded || err != nil {
		t.Fatalf("a good pair: loaded %v, err %v", loaded, err)
	}
	if ok, got := gauges(); ok != 1 || got <= loadedAt {
		t.Fatalf("a good reload: successful %v, loaded at %v (before %v); want 1 and later", ok, got, loadedAt)
	}
}
