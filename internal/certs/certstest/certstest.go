// Package certstest makes throwaway certificate authorities and
// certificates for tests, as net/http/httptest makes servers.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// CA is a throwaway certificate authority for tests.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	Pool *x509.CertPool
}

func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "once test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, Pool: pool}
}

// Issue writes a certificate for 127.0.0.1 with serial to certFile and its
// key to keyFile.
func (ca *CA) Issue(t testing.TB, serial int64, certFile, keyFile string) {
	t.Helper()
	ca.IssueFor(t, Spec{Serial: serial, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true}, certFile, keyFile)
}

// Spec says what a certificate is for.
type Spec struct {
	Serial int64
	// CommonName defaults to the first DNS name, or the first IP.
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// URIs are URI subject alternative names (a role: certs.Role.URI,
	// spiffe://once/role/operator).
	URIs []*url.URL
	// Server and Client set the extended key usages.
	Server, Client bool
	// NotBefore and NotAfter bound the validity (zero: from an hour ago
	// to an hour from now).
	NotBefore, NotAfter time.Time
}

// WriteCA writes the CA's certificate (PEM) to file.
func (ca *CA) WriteCA(t testing.TB, file string) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// IssueFor writes a certificate the CA signed as spec says to certFile and
// its key to keyFile.
func (ca *CA) IssueFor(t testing.TB, spec Spec, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cn := spec.CommonName
	switch {
	case cn != "":
	case len(spec.DNSNames) > 0:
		cn = spec.DNSNames[0]
	case len(spec.IPs) > 0:
		cn = spec.IPs[0].String()
	}
	var eku []x509.ExtKeyUsage
	if spec.Server {
		eku = append(eku, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		eku = append(eku, x509.ExtKeyUsageClientAuth)
	}
	notBefore, notAfter := spec.NotBefore, spec.NotAfter
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(time.Hour)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(spec.Serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		DNSNames: spec.DNSNames, IPAddresses: spec.IPs, URIs: spec.URIs, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: eku}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// Write to temporary names and rename, as a certificate manager does,
	// so a reload never sees half a file.
	for _, f := range []struct {
		path string
		blk  *pem.Block
	}{{certFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}}, {keyFile, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(f.blk), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}
