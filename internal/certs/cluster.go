package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
)

// ServerName is the name every manager's certificate carries (a DNS subject
// alternative name) and every cluster client verifies, whatever address it
// dialed: addresses change (containers, advertised addresses), the cluster's
// trust does not. Consul's servers carry server.<datacenter>.<domain> the
// same way.
const ServerName = "manager.once"

// ErrCA is matched by every error loading the cluster CA.
var ErrCA = errors.New("loading the cluster CA")

// Cluster is a node's side of the cluster's mutual TLS (docs/security.md):
// its certificate and key, and the cluster CA that signs every manager's and
// gate's certificate. Both are reloaded when their files change (Watch):
// handshakes after a reload use the new ones.
//
// Managers serve RPC and Raft with ServerConfig, which requires a client
// certificate signed by the CA; every caller (a gate, another manager,
// oncectl) dials with ClientConfig, which presents this node's certificate
// and accepts only a server certificate signed by the CA for ServerName.
type Cluster struct {
	// This node's certificate and the CA. A cluster derived from the secret
	// (FromSecret) stores its leaf, issued at start, and the derived CA once,
	// without files.
	pair *fileValue[tls.Certificate]
	ca   fileValue[x509.CertPool]
	log  *slog.Logger
	// status is that of Reload's looks at the CA and the pair together.
	status reloadStatus

	// derived: from the secret; TLS 1.3 with a role in every certificate.
	derived bool
}

// NewCluster loads the CA and the pair; an error matches ErrCA or ErrLoad.
func NewCluster(caFile, certFile, keyFile string, log *slog.Logger) (*Cluster, error) {
	c := &Cluster{pair: pairFiles(certFile, keyFile), log: logging.OrDiscard(log)}
	if _, err := c.pair.reload(); err != nil {
		return nil, err
	}
	c.ca = fileValue[x509.CertPool]{files: []string{caFile}, errStat: ErrCA, load: func() (*x509.CertPool, error) {
		b, err := readPEM(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCA, caFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrCA, caFile)
		}
		return pool, nil
	}}
	if _, err := c.ca.reload(); err != nil {
		return nil, err
	}
	c.status.record(true, nil)
	return c, nil
}

// LoadCluster loads a daemon's cluster TLS trio (nil when it is unset, as
// config.TLSFiles.Check allows); an error is a *config.Error naming the CA's
// variable, matching config.ErrInvalid and ErrCA or ErrLoad.
func LoadCluster(f config.TLSFiles, log *slog.Logger) (*Cluster, error) {
	if !f.Set() {
		return nil, nil
	}
	if log != nil {
		log = log.With(logging.KeyComponent, "cluster-tls")
	}
	c, err := NewCluster(f.CA, f.Cert, f.Key, log)
	if err != nil {
		return nil, config.Invalid(f.EnvCA, f.CA, "a readable PEM CA, with a certificate and key it signed in "+f.EnvCert+" and "+f.EnvKey, err)
	}
	return c, nil
}

// getCertificate is tls.Config.GetCertificate.
func (c *Cluster) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.pair.cur.Load(), nil
}

// minVersion is TLS 1.3 for a derived cluster (every process is this
// code), 1.2 with certificate files (other clients, Prometheus).
func (c *Cluster) minVersion() uint16 {
	if c.derived {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// Derived reports whether the cluster was derived from the cluster secret.
func (c *Cluster) Derived() bool { return c.derived }

// Reload loads the CA and the pair again where their files changed, and
// reports whether anything was loaded. On error what is in use stays.
func (c *Cluster) Reload() (bool, error) {
	if c.derived {
		return false, nil
	}
	ca, err1 := c.ca.reload()
	pair, err2 := c.pair.reload()
	return c.status.record(ca || pair, errors.Join(err1, err2))
}

// LastReload is the outcome of c's last reload of its CA and pair (of the
// load at start for a cluster derived from the secret, which has no files).
func (c *Cluster) LastReload() ReloadStatus { return c.status.get() }

// Watch reloads every interval until ctx ends, logging what it loads and
// what fails.
func (c *Cluster) Watch(ctx context.Context, interval time.Duration) {
	if c.derived {
		return // no files
	}
	watch(ctx, interval, c.Reload, c.pair, c.log, "cluster TLS", c.ca.files[0])
}

// ServerConfig is the TLS configuration of a manager's RPC listener: this
// node's certificate, and a client certificate signed by the cluster CA
// required of every caller, of a role in RPCRoles (or of none, with
// certificate files that carry no roles).
//
// The RPC listener serves the gRPC submit stream (HTTP/2) and the HTTP/1.1
// routes (reads, status, metrics) on one port, told apart by the first bytes
// a connection sends. A caller that offers http/1.1 in ALPN (curl,
// Prometheus, Go's http.Transport, which offer h2 too) is given http/1.1,
// which the routes speak; only a caller offering h2 alone (gRPC) is given
// h2.
func (c *Cluster) ServerConfig() *tls.Config { return c.serverConfig(RPCRoles, true) }

// RaftServerConfig is the TLS configuration of a manager's Raft port: as
// ServerConfig, but only a manager's certificate (RaftRoles) is accepted; a
// gate's is refused in the handshake.
func (c *Cluster) RaftServerConfig() *tls.Config { return c.serverConfig(RaftRoles, false) }

func (c *Cluster) serverConfig(accept []Role, alpn bool) *tls.Config {
	verify := func(cs tls.ConnectionState) error { return checkRole(cs, accept, c.derived) }
	return &tls.Config{
		MinVersion:     c.minVersion(),
		GetCertificate: c.getCertificate,
		// Per handshake, so that a reloaded CA applies to the next caller.
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			var protos []string
			if alpn {
				protos = []string{"h2"}
				if slices.Contains(hello.SupportedProtos, "http/1.1") {
					protos = []string{"http/1.1"}
				}
			}
			return &tls.Config{
				MinVersion:       c.minVersion(),
				GetCertificate:   c.getCertificate,
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        c.ca.cur.Load(),
				NextProtos:       protos,
				VerifyConnection: verify,
			}, nil
		},
	}
}

// ClientConfig is the TLS configuration of a caller of the managers: it
// presents this node's certificate and accepts a server only with a
// certificate the current cluster CA signed for ServerName.
func (c *Cluster) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: c.minVersion(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.pair.cur.Load(), nil
		},
		// The chain and the name are verified in VerifyConnection, against
		// the CA loaded now (RootCAs would fix the CA at the first dial).
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyConnection:   c.verifyServer,
		ServerName:         ServerName,
	}
}

func (c *Cluster) verifyServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         c.ca.cur.Load(),
		Intermediates: inter,
		DNSName:       ServerName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("the server's certificate is not the cluster's (%s, signed by the cluster CA): %w", ServerName, err)
	}
	// A server is a manager: a certificate of another role is refused.
	return checkRole(cs, []Role{RoleManager}, c.derived)
}
