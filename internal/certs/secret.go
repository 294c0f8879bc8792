package certs

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"
)

// The cluster secret (MANAGER_CLUSTER_SECRET_FILE, GATE_CLUSTER_SECRET_FILE)
// is turned into a certificate authority every process derives alike, so
// that a cluster secured by the secret alone still runs RPC and Raft over
// mutual TLS (docs/security.md): FromSecret derives the CA's ed25519 key with
// HKDF-SHA256 and builds its self-signed certificate from fixed fields (the
// same bytes in every process); each process then issues itself a leaf for
// its role with a fresh key (SecretCA.Cluster).

// secretCALabel is the HKDF info of the CA key; a new label is a new CA.
const secretCALabel = "once cluster CA v1"

// The derived CA's fixed certificate fields: every process derives the same
// certificate, byte for byte.
var (
	secretCASerial    = big.NewInt(1)
	secretCANotBefore = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	secretCANotAfter  = time.Date(2124, 1, 1, 0, 0, 0, 0, time.UTC)
)

// leafValidity is how long a derived leaf is valid; a process issues its own
// at every start.
const leafValidity = 10 * 365 * 24 * time.Hour

// ErrSecret is matched by every error deriving from the cluster secret.
var ErrSecret = errors.New("deriving TLS from the cluster secret")

// SecretCA is the certificate authority derived from the cluster secret.
type SecretCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
	pool *x509.CertPool
}

// FromSecret derives the cluster's CA from the secret: the same secret gives
// the same CA key and certificate in every process.
func FromSecret(secret string) (*SecretCA, error) {
	if secret == "" {
		return nil, fmt.Errorf("%w: empty secret", ErrSecret)
	}
	seed, err := hkdf.Key(sha256.New, []byte(secret), nil, secretCALabel, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecret, err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          secretCASerial,
		Subject:               pkix.Name{CommonName: "once cluster CA (derived from the cluster secret)"},
		NotBefore:             secretCANotBefore,
		NotAfter:              secretCANotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
		SubjectKeyId:          ski[:20],
	}
	// ed25519 signatures are deterministic: no randomness is read.
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("%w: the CA certificate: %w", ErrSecret, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%w: the CA certificate: %w", ErrSecret, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &SecretCA{key: key, cert: cert, pool: pool}, nil
}

// Certificate is the CA's certificate.
func (ca *SecretCA) Certificate() *x509.Certificate { return ca.cert }

// Pool holds the CA's certificate alone.
func (ca *SecretCA) Pool() *x509.CertPool { return ca.pool }

// PEM is the CA's certificate in PEM, for curl --cacert and Prometheus.
func (ca *SecretCA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// Issue signs a leaf for role with a fresh key: a manager's carries the DNS
// name ServerName and both server and client use; any other role's client
// use only.
func (ca *SecretCA) Issue(role Role) (*tls.Certificate, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: a key: %w", ErrSecret, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("%w: a serial: %w", ErrSecret, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "once " + string(role)},
		NotBefore:    now.Add(-time.Hour), // clocks of the cluster may disagree a little
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{role.URI()},
	}
	if role == RoleManager {
		tmpl.DNSNames = []string{ServerName}
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("%w: the %s certificate: %w", ErrSecret, role, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%w: the %s certificate: %w", ErrSecret, role, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Cluster issues a leaf for role and returns this process's side of the
// cluster's mutual TLS, as NewCluster does from files: TLS 1.3, every
// certificate carrying a role.
func (ca *SecretCA) Cluster(role Role) (*Cluster, error) {
	leaf, err := ca.Issue(role)
	if err != nil {
		return nil, err
	}
	c := &Cluster{pair: &fileValue[tls.Certificate]{}, derived: true}
	c.pair.cur.Store(leaf)
	c.ca.cur.Store(ca.pool)
	c.status.record(true, nil)
	return c, nil
}

// ClusterFromSecret is FromSecret then Cluster(role).
func ClusterFromSecret(secret string, role Role) (*Cluster, error) {
	ca, err := FromSecret(secret)
	if err != nil {
		return nil, err
	}
	return ca.Cluster(role)
}
