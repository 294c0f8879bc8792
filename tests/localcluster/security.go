package localcluster

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc"
)

// A cluster is secured by default (docs/security.md): without
// Options.Insecure, ClusterSecret or TLS, New generates a random cluster
// secret in <BaseDir>/cluster-secret (kept, so a restarted cluster keeps
// it), and the managers serve RPC and Raft over mutual TLS with the CA
// derived from it. Options.Insecure runs the processes with
// MANAGER_INSECURE/GATE_INSECURE instead.

// secretFile and gossipKeyFile are where a cluster keeps its generated
// credentials, under its BaseDir.
const (
	secretFile    = "cluster-secret"
	gossipKeyFile = "gossip-key"
)

// ensureCredential fills opts.ClusterSecret with the secret kept in dir
// (generated on the first run) unless the cluster is insecure or was given
// a secret or TLS files; with TLS files and no secret it fills gossipKey, the
// gossip pools' key (a secured cluster never gossips in plaintext).
func ensureCredential(opts *Options, dir string) (gossipKey string, err error) {
	if opts.Insecure {
		if opts.ClusterSecret != "" || opts.TLS != nil || opts.OperatorSecret != "" {
			return "", errors.New("localcluster: Insecure together with ClusterSecret, OperatorSecret or TLS")
		}
		return "", nil
	}
	switch {
	case opts.ClusterSecret != "":
		return "", nil
	case opts.TLS != nil:
		return kept(dir, gossipKeyFile, func(b []byte) string { return base64.StdEncoding.EncodeToString(b) })
	default:
		opts.ClusterSecret, err = kept(dir, secretFile, hex.EncodeToString)
		return "", err
	}
}

// kept returns the value kept in dir/name, or writes a new random one
// (32 bytes, encoded by enc) there first.
func kept(dir, name string, enc func([]byte) string) (string, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	v := enc(raw)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
		return "", err
	}
	return v, nil
}

// Secured reports whether the cluster runs with a credential (the default).
func (c *Cluster) Secured() bool { return !c.opts.Insecure }

// ClusterSecret is the cluster's secret ("" with TLS files alone, or
// insecure).
func (c *Cluster) ClusterSecret() string { return c.opts.ClusterSecret }

// SecretFile is the file holding the cluster secret, for oncectl's
// --cluster-secret-file ("" without a secret).
func (c *Cluster) SecretFile() string {
	if c.opts.ClusterSecret == "" {
		return ""
	}
	return filepath.Join(c.opts.BaseDir, secretFile)
}

// managerScheme is the URL scheme of the managers' RPC listeners: TLS
// whenever the cluster is secured (TLS files or the derived CA).
func (c *Cluster) managerScheme() string {
	if c.opts.Insecure {
		return "http"
	}
	return "https"
}

// gateScheme is the URL scheme of the gates' API: HTTPS with TLS files only
// (the gates' own certificate).
func (c *Cluster) gateScheme() string {
	if c.opts.TLS != nil {
		return "https"
	}
	return "http"
}

// ManagerURL is the URL of path (starting with /) on manager n's RPC
// listener.
func (c *Cluster) ManagerURL(n *Node, path string) string {
	return c.managerScheme() + "://" + n.HTTPAddr + path
}

// NodeURL is the URL of path on n's HTTP listener: a manager's RPC
// listener (ManagerURL) or a gate's API.
func (c *Cluster) NodeURL(n *Node, path string) string {
	if n.Role == RoleManager {
		return c.ManagerURL(n, path)
	}
	return c.gateScheme() + "://" + n.HTTPAddr + path
}

// HTTPClient is the harness's client: it trusts the cluster's CA (the
// TLS files' or the one derived from the secret), presents a client
// certificate and the secret to the managers, and reaches the gates
// without them (the caller's tenant token passes).
func (c *Cluster) HTTPClient() *http.Client { return c.client }

// HTTPClientWithoutSecret is HTTPClient without the cluster secret: the same
// TLS, to show what the managers answer a caller that lacks the secret.
func (c *Cluster) HTTPClientWithoutSecret() *http.Client { return c.noSecret }

// RPCClient is an rpc.Client of the managers with the cluster's credentials
// (the secret, and TLS towards the managers) added to cfg.
func (c *Cluster) RPCClient(cfg rpc.ClientConfig) *rpc.Client {
	cfg.Secret = c.opts.ClusterSecret
	cfg.TLS = c.rpcTLS
	return rpc.NewClient(cfg)
}

// RPCClientWithSecret is RPCClient presenting secret (none when empty)
// instead of the cluster's: to show what the managers answer a caller that
// lacks it.
func (c *Cluster) RPCClientWithSecret(cfg rpc.ClientConfig, secret string) *rpc.Client {
	cfg.Secret = secret
	cfg.TLS = c.rpcTLS
	return rpc.NewClient(cfg)
}

// OncectlArgs are the credential flags oncectl needs for this cluster's
// managers, the operator commands included.
func (c *Cluster) OncectlArgs() []string {
	var args []string
	if f := c.opts.TLS; f != nil {
		args = append(args, "--cacert", f.CA, "--cert", f.HarnessClientCert, "--key", f.HarnessClientKey)
	}
	if s := c.SecretFile(); s != "" {
		args = append(args, "--cluster-secret-file", s)
	}
	if s := c.OperatorSecretFile(); s != "" {
		args = append(args, "--operator-secret-file", s)
	}
	if c.opts.Insecure {
		args = append(args, "--insecure")
	}
	return args
}

// derivedClientTLS is the harness's TLS configuration towards managers
// secured by the secret alone: a leaf of the CA derived from it. The harness
// acts as oncectl does, with the managers' role.
func derivedClientTLS(secret string) (*tls.Config, error) {
	cl, err := certs.ClusterFromSecret(secret, certs.RoleManager)
	if err != nil {
		return nil, fmt.Errorf("localcluster: the CA derived from the cluster secret: %w", err)
	}
	return cl.ClientConfig(), nil
}

// byHost sends a request for one of the cluster's gates (host:port, filled
// while New lays the gates out, read-only afterwards) through gate, which
// adds no credential: a gate's Authorization header is a tenant's bearer
// token, and a gate is never sent the cluster or operator secret. Every
// other request, a manager's, goes through other.
type byHost struct {
	gates       map[string]bool
	gate, other http.RoundTripper
}

func (t byHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.gates[r.URL.Host] {
		return t.gate.RoundTrip(r)
	}
	return t.other.RoundTrip(r)
}

// CloseIdleConnections reaches both transports, so http.Client's does.
func (t byHost) CloseIdleConnections() {
	for _, rt := range []http.RoundTripper{t.gate, t.other} {
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// withSecret returns rt sending the cluster secret as the managers' HTTP
// routes read it (`authorization: Bearer <secret>`, docs/security.md) with
// every request; rt itself when secret is empty.
func withSecret(rt http.RoundTripper, secret string) http.RoundTripper {
	if secret == "" {
		return rt
	}
	return secretTransport{rt: rt, value: "Bearer " + secret}
}

type secretTransport struct {
	rt    http.RoundTripper
	value string
}

func (t secretTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.value)
	return t.rt.RoundTrip(r)
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections
// still reaches the transport.
func (t secretTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
