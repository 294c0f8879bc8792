// Package certs keeps a TLS certificate and key loaded from files and
// reloads them when the files change, so a process picks up a renewed
// certificate without a restart: handshakes after the reload present the new
// one, connections already open keep theirs. A reload that fails (a file
// half-written, a key that does not match) keeps the certificate in use and
// is reported; the next change is tried again.
package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/logging"
)

// ErrLoad is matched by every error loading the pair.
var ErrLoad = errors.New("loading the TLS certificate")

// Reloader holds the current certificate of a cert/key file pair.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger

	cur atomic.Pointer[tls.Certificate]

	mu      sync.Mutex // serialises reloads
	modCert time.Time
	modKey  time.Time
}

// New loads the pair; an error (unreadable files, a key that does not match
// the certificate) matches ErrLoad.
func New(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load(), nil
}

// Certificate returns the certificate in use.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load() }

// Reload loads the pair again if either file changed since the last load
// (by modification time), and reports whether it did. On error the
// certificate in use stays.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ci, err1 := os.Stat(r.certFile)
	ki, err2 := os.Stat(r.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return false, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	if r.cur.Load() != nil && ci.ModTime().Equal(r.modCert) && ki.ModTime().Equal(r.modKey) {
		return false, nil
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return false, fmt.Errorf("%w from %s and %s: %w", ErrLoad, r.certFile, r.keyFile, err)
	}
	r.cur.Store(&pair)
	r.modCert, r.modKey = ci.ModTime(), ki.ModTime()
	return true, nil
}

// Watch reloads the pair every interval until ctx ends, logging what it
// loads and what fails.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	watch(ctx, interval, r.Reload, r.log, "TLS certificate", r.certFile)
}

// watch calls reload every interval until ctx ends, logging what it loads
// (what, file) and what fails: what was loaded before stays in use.
func watch(ctx context.Context, interval time.Duration, reload func() (bool, error), log *slog.Logger, what, file string) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch loaded, err := reload(); {
		case err != nil:
			log.Error(what+" not reloaded; what was loaded before stays in use", logging.KeyFile, file, logging.KeyError, err)
		case loaded:
			log.Info(what+" reloaded", logging.KeyFile, file)
		}
	}
}

// ServerConfig returns a TLS configuration that presents the current
// certificate (TLS 1.2 at least).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12}
}
