package certs

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs/certstest"
)

// A caller that resumes a TLS session (a session ticket from a handshake
// made while its CA was trusted) is refused once that CA is removed from
// the CA file: resumption does not carry a trust the reload withdrew. It
// resumes while its CA is still trusted (the test sees that resumption
// happens at all).
func TestRemovedCARefusesAResumedSession(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := certstest.NewCA(t), certstest.NewCA(t)
	f := clusterFiles(t, newCA, dir, "manager", managerSpec)
	bundle(t, f[0], oldCA, newCA)
	server := newCluster(t, f)
	addr := certstest.Serve(t, server.ServerConfig())
	oldGate := bundledGate(t, oldCA, dir, "old-gate", oldCA, newCA)
	cfg := oldGate.ClientConfig()
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	// The ticket is sent after the handshake: read the answer, then dial
	// again to resume.
	for range 2 {
		if err := certstest.Call(addr, cfg); err != nil {
			t.Fatalf("a caller of the old CA during the overlap: %v", err)
		}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	resumed := c.ConnectionState().DidResume
	_ = c.Close()
	if !resumed {
		t.Fatal("the caller did not resume its session: the test shows nothing")
	}
	newCA.WriteCA(t, f[0])
	at := time.Now().Add(time.Hour)
	touch(t, at, f[0])
	if loaded, err := server.Reload(); !loaded || err != nil {
		t.Fatalf("reload: %v %v", loaded, err)
	}
	if err := certstest.Call(addr, cfg); err == nil {
		t.Fatal("a caller of the removed CA resumed its session and was served")
	}
}
