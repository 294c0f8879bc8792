package certs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs/certstest"
)

// appendHalf appends the first half of src's content to file: what a
// reload sees while a chain or a bundle is being written in place.
func appendHalf(t *testing.T, file, src string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(b, s[:len(s)/2]...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A renewed certificate file caught half-written, its leaf whole and the
// intermediate after it cut short, is not loaded: its leaf matches the new
// key, but presented without the rest of its chain it would be refused by
// every peer that needs the intermediate until the next look. The pair in
// use stays; the whole file is loaded at the next look.
func TestReloadRefusesACertificateFileCutShort(t *testing.T) {
	dir := t.TempDir()
	cf, kf, ca, r := loadedPair(t, dir)
	caFile := filepath.Join(dir, "intermediate.pem")
	certstest.NewCA(t).WriteCA(t, caFile) // stands for an intermediate
	ca.Issue(t, 11, cf, kf)
	appendHalf(t, cf, caFile)
	at := time.Now().Add(time.Hour)
	touch(t, at, cf, kf)
	if loaded, err := r.Reload(); loaded || !errors.Is(err, ErrLoad) || serial(r) != 10 {
		t.Fatalf("a certificate file cut short: loaded %v, err %v, serial %d; want the pair in use (10) kept", loaded, err, serial(r))
	}
	// The file completed: loaded.
	ca.Issue(t, 11, cf, kf)
	b, _ := os.ReadFile(caFile)
	f, err := os.OpenFile(cf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	f.Close()
	touch(t, at.Add(time.Second), cf, kf)
	if loaded, err := r.Reload(); !loaded || err != nil || serial(r) != 11 {
		t.Fatalf("the whole file: loaded %v, err %v, serial %d", loaded, err, serial(r))
	}
}

// A CA bundle rewritten in place (new CA first, then the old one) and caught
// with its second certificate cut short is not loaded: loaded, it would drop
// the old CA, and every caller still presenting a certificate of it would be
// refused until the next look. The bundle in use stays.
func TestReloadRefusesACABundleCutShort(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := certstest.NewCA(t), certstest.NewCA(t)
	f, server, addr := servedManager(t, oldCA, dir)
	oldGate := bundledGate(t, oldCA, dir, "old-gate", oldCA, newCA)

	oldFile := filepath.Join(dir, "old-ca.pem")
	oldCA.WriteCA(t, oldFile)
	newCA.WriteCA(t, f[0])
	appendHalf(t, f[0], oldFile)
	touch(t, time.Now().Add(time.Hour), f[0])
	if loaded, err := server.Reload(); loaded || !errors.Is(err, ErrCA) {
		t.Fatalf("a CA bundle cut short: loaded %v, err %v; want it refused", loaded, err)
	}
	if err := certstest.Call(addr, oldGate.ClientConfig()); err != nil {
		t.Fatalf("a caller of the old CA after a bundle cut short was seen: %v", err)
	}
}
