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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/logging"
)

// ErrLoad is matched by every error loading the pair.
var ErrLoad = errors.New("loading the TLS certificate")

// Reloader holds the current certificate of a cert/key file pair.
type Reloader struct {
	pair *fileValue[tls.Certificate]
	log  *slog.Logger
}

// New loads the pair; an error (unreadable files, a key that does not match
// the certificate) matches ErrLoad.
func New(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{pair: pairFiles(certFile, keyFile), log: logging.OrDiscard(log)}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// pairFiles is the certificate and key of a file pair, not loaded yet.
func pairFiles(certFile, keyFile string) *fileValue[tls.Certificate] {
	return &fileValue[tls.Certificate]{files: []string{certFile, keyFile}, errStat: ErrLoad,
		load: func() (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("%w from %s and %s: %w", ErrLoad, certFile, keyFile, err)
			}
			return &pair, nil
		}}
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.pair.cur.Load(), nil
}

// Certificate returns the certificate in use.
func (r *Reloader) Certificate() *tls.Certificate { return r.pair.cur.Load() }

// Reload loads the pair again if either file changed since the last load
// (by modification time), and reports whether it did. On error the
// certificate in use stays.
func (r *Reloader) Reload() (bool, error) { return r.pair.reload() }

// fileValue is a value loaded from files (a certificate and its key, a CA
// bundle): readers take the current one without a lock, and reload loads
// it again when a file's modification time changed.
type fileValue[T any] struct {
	files   []string
	errStat error // wraps the error of a file that cannot be stat'ed
	load    func() (*T, error)

	cur  atomic.Pointer[T]
	mu   sync.Mutex // serialises reloads
	mods []time.Time
}

// reload loads the value again if a file changed since the last load, and
// reports whether it did. On error the value in use stays.
func (v *fileValue[T]) reload() (bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	mods := make([]time.Time, len(v.files))
	var errs []error
	for i, f := range v.files {
		fi, err := os.Stat(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mods[i] = fi.ModTime()
	}
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("%w: %w", v.errStat, err)
	}
	if v.cur.Load() != nil && slices.EqualFunc(mods, v.mods, time.Time.Equal) {
		return false, nil
	}
	x, err := v.load()
	if err != nil {
		return false, err
	}
	v.cur.Store(x)
	v.mods = mods
	return true, nil
}

// Watch reloads the pair every interval until ctx ends, logging what it
// loads and what fails.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	watch(ctx, interval, r.Reload, r.log, "TLS certificate", r.pair.files[0])
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
