// Package certs keeps a TLS certificate and key loaded from files and
// reloads them when the files change, so a process picks up a renewed
// certificate without a restart: handshakes after the reload present the new
// one, connections already open keep theirs. A reload that fails (a file
// half-written, a key that does not match) keeps the certificate in use and
// is reported; the next change is tried again.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
)

// ErrLoad is matched by every error loading the pair.
var ErrLoad = errors.New("loading the TLS certificate")

// Reloader holds the current certificate of a cert/key file pair.
type Reloader struct {
	pair   *fileValue[tls.Certificate]
	log    *slog.Logger
	status reloadStatus
}

// New loads the pair; an error (unreadable files, a key that does not match
// the certificate, a certificate that is not valid now) matches ErrLoad.
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
			// The paths as errors show them: a key's PEM given where its
			// path is wanted is not repeated (config.ShownPath).
			certName, keyName := config.ShownPath(certFile), config.ShownPath(keyFile)
			certPEM, err := readPEM(certFile)
			if err != nil {
				return nil, fmt.Errorf("%w from %s: %w", ErrLoad, certName, err)
			}
			keyPEM, err := readPEM(keyFile)
			if err != nil {
				return nil, fmt.Errorf("%w from %s: %w", ErrLoad, keyName, err)
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return nil, fmt.Errorf("%w from %s and %s: %w", ErrLoad, certName, keyName, err)
			}
			if err := checkValidity(pair.Leaf, time.Now()); err != nil {
				return nil, fmt.Errorf("%w from %s: %w", ErrLoad, certFile, err)
			}
			return &pair, nil
		}}
}

// ErrCutShort is matched by the error of a PEM file whose last block is cut
// short: a file caught while it is written in place.
var ErrCutShort = errors.New("a PEM block is cut short (the file is being written?)")

// readPEM reads a PEM file, refusing one with a block cut short. The
// standard library skips such a block and loads the whole ones before it: a
// certificate chain caught with its leaf whole and its intermediate half
// written would be presented without the intermediate, a CA bundle caught
// half rewritten would drop the CAs not written yet, each until the next
// look. Refused, the value in use stays and the file is tried again then.
func readPEM(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, config.WithheldPath(file, err)
	}
	for rest := b; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			if bytes.Contains(rest, []byte("-----BEGIN")) {
				return nil, ErrCutShort
			}
			return b, nil
		}
	}
}

// ErrNotValidNow is matched by the error of a certificate loaded outside its
// validity period (expired, or not valid yet).
var ErrNotValidNow = errors.New("the certificate is not valid now")

// checkValidity refuses a leaf outside its validity period at now: every
// peer would refuse it in the handshake, so a reload that found one (a
// renewal gone wrong, a stale file copied back, a clock behind the issuer's)
// keeps the certificate in use, and tries again at the next look; at start
// the process stops with the reason instead of failing every handshake.
func checkValidity(leaf *x509.Certificate, now time.Time) error {
	if leaf == nil {
		return nil
	}
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("%w: it expired at %s", ErrNotValidNow, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("%w: it is valid from %s only", ErrNotValidNow, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.pair.cur.Load(), nil
}

// Certificate returns the certificate in use.
func (r *Reloader) Certificate() *tls.Certificate { return r.pair.cur.Load() }

// Reload loads the pair again if either file changed since the last load
// (by modification time or size), and reports whether it did. On error the
// certificate in use stays.
func (r *Reloader) Reload() (bool, error) { return r.status.record(r.pair.reload()) }

// LastReload is the outcome of r's last reload (monitoring's view of it).
func (r *Reloader) LastReload() ReloadStatus { return r.status.get() }

// ReloadStatus is the outcome of the reloads of a process's TLS files, as
// Prometheus tells its configuration's (prometheus_config_last_reload_*):
// a reload that fails keeps what was loaded before in use, so a renewed
// certificate that does not load is otherwise seen only in the log, until
// the old one expires.
type ReloadStatus struct {
	// OK: the last look loaded the files or found them unchanged.
	OK bool
	// Loaded is when the files were last loaded (at start, or by a reload
	// that found them changed).
	Loaded time.Time
}

// reloadStatus records the outcome of each reload.
type reloadStatus struct {
	mu sync.Mutex
	s  ReloadStatus
}

// record notes the outcome of a reload and returns it as it is.
func (r *reloadStatus) record(loaded bool, err error) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.OK = err == nil
	if loaded {
		r.s.Loaded = time.Now()
	}
	return loaded, err
}

func (r *reloadStatus) get() ReloadStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s
}

// fileValue is a value loaded from files (a certificate and its key, a CA
// bundle): readers take the current one without a lock, and reload loads
// it again when a file's modification time or size changed.
type fileValue[T any] struct {
	files   []string
	errStat error // wraps the error of a file that cannot be stat'ed
	load    func() (*T, error)

	cur atomic.Pointer[T]
	mu  sync.Mutex // serialises reloads
	// stamps are the files' modification times and sizes at the last load.
	// The size too: a file written in place (cat new.pem >> ca.pem) may
	// change again within one tick of the file system's clock after a look
	// that read it half-written and loaded what it held (a bundle with its
	// first certificate whole).
	stamps []fileStamp
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	mod  time.Time
	size int64
}

func (a fileStamp) equal(b fileStamp) bool { return a.mod.Equal(b.mod) && a.size == b.size }

// reload loads the value again if a file changed since the last load, and
// reports whether it did. On error the value in use stays.
func (v *fileValue[T]) reload() (bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	stamps := make([]fileStamp, len(v.files))
	var errs []error
	for i, f := range v.files {
		fi, err := os.Stat(f)
		if err != nil {
			errs = append(errs, config.WithheldPath(f, err))
			continue
		}
		stamps[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("%w: %w", v.errStat, err)
	}
	if v.cur.Load() != nil && slices.EqualFunc(stamps, v.stamps, fileStamp.equal) {
		return false, nil
	}
	x, err := v.load()
	if err != nil {
		return false, err
	}
	v.cur.Store(x)
	v.stamps = stamps
	return true, nil
}

// Watch reloads the pair every interval until ctx ends, logging what it
// loads and what fails.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	watch(ctx, interval, r.Reload, r.pair, r.log, "TLS certificate", r.pair.files[0])
}

// watch calls reload every interval until ctx ends, logging what it loads
// (what, file) and what fails: what was loaded before stays in use. At each
// look it also says, at error, when the certificate of pair in use is not
// valid now: one that expired while its files stayed as they were (a renewal
// forgotten, or one that fails to load) is refused by every peer, and
// nothing else in the process would say why.
func watch(ctx context.Context, interval time.Duration, reload func() (bool, error), pair *fileValue[tls.Certificate],
	log *slog.Logger, what, file string) {
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
		if cur := pair.cur.Load(); cur != nil {
			if err := checkValidity(cur.Leaf, time.Now()); err != nil {
				log.Error(what+": the certificate in use is not valid now, and every peer refuses it until a valid one is loaded",
					logging.KeyFile, pair.files[0], logging.KeyError, err)
			}
		}
	}
}

// ServerConfig returns a TLS configuration that presents the current
// certificate (TLS 1.2 at least).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12}
}
