package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/internal/testutil"
)

// touch sets a file's modification time.
func touch(t *testing.T, at time.Time, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// A renewed pair that is not valid now (expired, or valid only from later:
// a stale file copied back, an issuer's clock ahead) is not loaded: every
// peer would refuse it, so the certificate in use stays, the error says
// why, and the pair is tried again at the next look, loaded once it is
// valid. At start such a pair is refused with the same error.
func TestReloadKeepsTheCertificateForOneNotValidNow(t *testing.T) {
	cf, kf, ca, r := loadedPair(t, t.TempDir())
	at := time.Now().Add(time.Hour)
	now := time.Now()
	for i, spec := range []certstest.Spec{
		{Serial: 11, Server: true, NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)},
		{Serial: 12, Server: true, NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)},
	} {
		ca.IssueFor(t, spec, cf, kf)
		at = at.Add(time.Second)
		touch(t, at, cf, kf)
		if loaded, err := r.Reload(); loaded || !errors.Is(err, ErrLoad) || !errors.Is(err, ErrNotValidNow) || serial(r) != 10 {
			t.Fatalf("pair %d: loaded %v, err %v, serial %d; want the certificate in use kept", i, loaded, err, serial(r))
		}
		if _, err := New(cf, kf, nil); !errors.Is(err, ErrNotValidNow) {
			t.Fatalf("pair %d at start: %v; want ErrNotValidNow", i, err)
		}
		// Not marked as loaded: the next look tries it again.
		if loaded, err := r.Reload(); loaded || !errors.Is(err, ErrNotValidNow) {
			t.Fatalf("pair %d looked at again: loaded %v, err %v", i, loaded, err)
		}
	}
	ca.Issue(t, 13, cf, kf)
	touch(t, at.Add(time.Second), cf, kf)
	if loaded, err := r.Reload(); !loaded || err != nil || serial(r) != 13 {
		t.Fatalf("a valid pair: loaded %v, err %v, serial %d", loaded, err, serial(r))
	}
}

// A file rewritten in place within one tick of the file system's clock
// after a look that loaded it half-written (a CA bundle whose first
// certificate was whole) is loaded again: its size changed.
func TestReloadSeesARewriteOfTheSameModificationTime(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := certstest.NewCA(t), certstest.NewCA(t)
	f, server, addr := servedManager(t, oldCA, dir)
	gate := bundledGate(t, newCA, dir, "gate", oldCA, newCA)

	// The bundle old+new, written in place, seen when only the old CA was
	// in it, and then whole, at the same modification time.
	at := time.Now().Add(time.Hour)
	oldCA.WriteCA(t, f[0])
	touch(t, at, f[0])
	if _, err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	bundle(t, f[0], oldCA, newCA)
	touch(t, at, f[0])
	if loaded, err := server.Reload(); !loaded || err != nil {
		t.Fatalf("the bundle completed at the same time: loaded %v, err %v", loaded, err)
	}
	if err := certstest.Call(addr, gate.ClientConfig()); err != nil {
		t.Fatalf("a caller of the new CA after the bundle was loaded: %v", err)
	}
}

// bundledGate is a gate with a certificate of ca that trusts the managers
// of trusted (its CA file the bundle of their certificates).
func bundledGate(t *testing.T, ca *certstest.CA, dir, name string, trusted ...*certstest.CA) *Cluster {
	t.Helper()
	f := clusterFiles(t, ca, dir, name, certstest.Spec{Serial: 3, Client: true})
	bundle(t, f[0], trusted...)
	return newCluster(t, f)
}

// bundle writes the certificates of cas into file, one after the other.
func bundle(t *testing.T, file string, cas ...*certstest.CA) {
	t.Helper()
	var b []byte
	for i, ca := range cas {
		one := filepath.Join(t.TempDir(), "ca"+string(rune('0'+i))+".pem")
		ca.WriteCA(t, one)
		p, err := os.ReadFile(one)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, p...)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A CA rotation as docs/security.md tells it: both CAs in the CA file, the
// certificates rolled, then the old CA removed. During the overlap callers
// and managers of either CA are accepted; after it, only the new CA's. A
// CA file caught half-written, or emptied, keeps the bundle in use: the
// caller without a certificate is refused throughout.
func TestClusterCARotationWithOverlap(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := certstest.NewCA(t), certstest.NewCA(t)
	f, server, addr := servedManager(t, oldCA, dir)
	// The gates trust both CAs from the start (the first step of a
	// rotation on every node): what is tested is the manager's side.
	oldGate := bundledGate(t, oldCA, dir, "old-gate", oldCA, newCA)
	newGate := bundledGate(t, newCA, dir, "new-gate", oldCA, newCA)
	noCert := oldGate.ClientConfig()
	noCert.GetClientCertificate = nil
	at := time.Now().Add(time.Hour)
	reload := func(step string, wantErr bool) {
		t.Helper()
		at = at.Add(time.Second)
		touch(t, at, f[:]...)
		if _, err := server.Reload(); (err != nil) != wantErr {
			t.Fatalf("%s: reload error %v, want an error: %v", step, err, wantErr)
		}
		if err := certstest.Call(addr, noCert); err == nil {
			t.Fatalf("%s: a caller without a certificate was accepted", step)
		}
	}
	calls := func(step string, wantOld, wantNew bool) {
		t.Helper()
		if err := certstest.Call(addr, oldGate.ClientConfig()); (err == nil) != wantOld {
			t.Errorf("%s: a caller of the old CA: %v, want accepted %v", step, err, wantOld)
		}
		if err := certstest.Call(addr, newGate.ClientConfig()); (err == nil) != wantNew {
			t.Errorf("%s: a caller of the new CA: %v, want accepted %v", step, err, wantNew)
		}
	}
	calls("before", true, false)

	bundle(t, f[0], oldCA, newCA)
	reload("both CAs", false)
	calls("both CAs", true, true)

	// The manager's certificate rolled to the new CA: callers trusting both
	// accept it.
	newCA.IssueFor(t, managerSpec, f[1], f[2])
	reload("the manager's certificate rolled", false)
	calls("the manager's certificate rolled", true, true)

	// Half-written and emptied CA files are refused; the bundle stays.
	full, err := os.ReadFile(f[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, broken := range [][]byte{full[:20], {}} {
		if err := os.WriteFile(f[0], broken, 0o600); err != nil {
			t.Fatal(err)
		}
		reload("a broken CA file", true)
		calls("a broken CA file", true, true)
	}

	newCA.WriteCA(t, f[0])
	reload("the old CA removed", false)
	calls("the old CA removed", false, true)
}

// A certificate in use that expires while its files stay as they are (the
// renewal forgotten, or failing to load) is said to be expired at each look:
// every peer refuses it from then on, and without the log line nothing in
// the process would say why. The same holds for a cluster's certificate.
func TestWatchSaysTheCertificateInUseExpired(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	// Valid at load, expired a moment later (x509 times are whole seconds).
	expiring := certstest.Spec{Serial: 20, Server: true, Client: true, DNSNames: []string{ServerName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Second)}
	cf, kf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.IssueFor(t, expiring, cf, kf)
	caf := filepath.Join(dir, "ca.pem")
	ca.WriteCA(t, caf)

	var pairLog, clusterLog testutil.Buffer
	r, err := New(cf, kf, slog.New(slog.NewTextHandler(&pairLog, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(caf, cf, kf, slog.New(slog.NewTextHandler(&clusterLog, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { r.Watch(ctx, 10*time.Millisecond) })
	wg.Go(func() { c.Watch(ctx, 10*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		p, cl := pairLog.String(), clusterLog.String()
		return strings.Contains(p, "expired at") && strings.Contains(p, "level=ERROR") && strings.Contains(cl, "expired at"),
			"the pair's log:\n" + p + "\nthe cluster's log:\n" + cl
	})
}

// A reload that fails (a renewed certificate whose key does not match) is
// seen in LastReload, for monitoring: not OK, the time of the last load
// unchanged, the certificate in use kept. The next good pair makes it OK
// again and moves the time. The same holds for a cluster's pair.
func TestLastReloadTellsAFailedReload(t *testing.T) {
	dir := t.TempDir()
	cf, kf, ca, r := loadedPair(t, dir)
	f := clusterFiles(t, ca, dir, "node", managerSpec)
	c := newCluster(t, f)
	for _, tc := range []struct {
		name           string
		cert, key      string
		reload         func() (bool, error)
		last           func() ReloadStatus
		inUse          func() *tls.Certificate
		good, mismatch certstest.Spec
	}{
		{"pair", cf, kf, r.Reload, r.LastReload, r.Certificate,
			certstest.Spec{Serial: 31, Server: true}, certstest.Spec{Serial: 30, Server: true}},
		{"cluster", f[1], f[2], c.Reload, c.LastReload, c.pair.cur.Load,
			certstest.Spec{Serial: 33, Server: true, Client: true, DNSNames: []string{ServerName}},
			certstest.Spec{Serial: 32, Server: true, Client: true, DNSNames: []string{ServerName}}},
	} {
		at := time.Now().Add(time.Hour)
		before := tc.last()
		if !before.OK || before.Loaded.IsZero() {
			t.Fatalf("%s: loaded at start: %+v", tc.name, before)
		}
		inUse := tc.inUse()
		// A new certificate over the old key.
		ca.IssueFor(t, tc.mismatch, tc.cert, filepath.Join(t.TempDir(), "other-key.pem"))
		touch(t, at, tc.cert, tc.key)
		if _, err := tc.reload(); !errors.Is(err, ErrLoad) {
			t.Fatalf("%s: a certificate that does not match its key: %v", tc.name, err)
		}
		if got := tc.last(); got.OK || !got.Loaded.Equal(before.Loaded) || tc.inUse() != inUse {
			t.Fatalf("%s: after a failed reload %+v (before %+v); want not OK, the load time and the certificate kept", tc.name, got, before)
		}
		ca.IssueFor(t, tc.good, tc.cert, tc.key)
		touch(t, at.Add(time.Second), tc.cert, tc.key)
		if loaded, err := tc.reload(); !loaded || err != nil {
			t.Fatalf("%s: a good pair: loaded %v, err %v", tc.name, loaded, err)
		}
		if got := tc.last(); !got.OK || !got.Loaded.After(before.Loaded) {
			t.Fatalf("%s: after a good reload %+v (before %+v); want OK, a later load time", tc.name, got, before)
		}
	}
}
