package rpc

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"

	"github.com/soheilhy/cmux"
)

// The operator role (docs/security.md, "Operator role"). The cluster secret
// and the cluster certificates say a caller belongs to the cluster: a gate,
// another manager, oncectl. What administers the cluster (the operator
// routes: snapshot save and restore, Raft peer changes, leadership transfer,
// the gossip keyring, the pool's members) asks for more: an operator
// credential, either
//
//   - the operator secret (MANAGER_OPERATOR_SECRET_FILE), which oncectl sends
//     in the OperatorSecretHeader header, compared in constant time; or
//   - a client certificate the cluster CA signed that carries the URI SAN
//     OperatorRoleURI, on a manager serving RPC over mutual TLS.
//
// Anything else is answered CodeForbidden (403) before the route runs.

// OperatorSecretHeader carries the operator secret.
const OperatorSecretHeader = "Once-Operator-Secret"

// OperatorRoleURI is the URI SAN of an operator's client certificate.
const OperatorRoleURI = "spiffe://once/role/operator"

// HasOperatorRole reports whether cert carries OperatorRoleURI.
func HasOperatorRole(cert *x509.Certificate) bool {
	if cert == nil {
		return false
	}
	for _, u := range cert.URIs {
		if u.String() == OperatorRoleURI {
			return true
		}
	}
	return false
}

// OperatorAuth is what the operator routes accept.
type OperatorAuth struct {
	// Secret is the operator secret ("" none).
	Secret string
	// OpenWithoutCredentials opens the operator routes to every caller. A
	// manager sets it only when it runs with no credential at all (no
	// cluster secret, no cluster TLS, no operator secret): its RPC listener
	// is open to anyone who reaches it anyway.
	OpenWithoutCredentials bool
}

// allows reports whether r carries an operator credential.
func (a OperatorAuth) allows(r *http.Request) bool {
	if a.OpenWithoutCredentials {
		return true
	}
	if a.Secret != "" {
		got := r.Header.Get(OperatorSecretHeader)
		if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(a.Secret)) == 1 {
			return true
		}
	}
	// The listener verified the chain against the cluster CA during the
	// handshake (RequireAndVerifyClientCert); the role is the leaf's.
	if certs := peerCertificates(r); len(certs) > 0 {
		return HasOperatorRole(certs[0])
	}
	return false
}

// require wraps h: a request without an operator credential is 403.
func (a OperatorAuth) require(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.allows(r) {
			writeError(w, &Error{Code: CodeForbidden, Message: "an operator credential is required (the " +
				OperatorSecretHeader + " header, or a client certificate with the URI SAN " + OperatorRoleURI + ")"})
			return
		}
		h(w, r)
	}
}

// tlsConnKey keys the connection's *tls.Conn in a request's context: the
// listener's connections reach net/http wrapped by cmux, so http.Request.TLS
// stays nil.
type tlsConnKey struct{}

// connContext is the RPC HTTP server's ConnContext: it keeps the
// connection's *tls.Conn (under cmux's wrapper) for peerCertificates.
func connContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch x := c.(type) {
		case *tls.Conn:
			return context.WithValue(ctx, tlsConnKey{}, x)
		case *cmux.MuxConn:
			c = x.Conn
		default:
			return ctx
		}
	}
}

// peerCertificates returns the certificates the caller presented, if any.
func peerCertificates(r *http.Request) []*x509.Certificate {
	if r.TLS != nil {
		return r.TLS.PeerCertificates
	}
	if c, ok := r.Context().Value(tlsConnKey{}).(*tls.Conn); ok {
		return c.ConnectionState().PeerCertificates
	}
	return nil
}

// WithOperatorSecret returns rt sending the operator secret with every
// request (rt itself when secret is empty).
func WithOperatorSecret(rt http.RoundTripper, secret string) http.RoundTripper {
	if secret == "" {
		return rt
	}
	return headerTransport{rt: rt, name: OperatorSecretHeader, value: secret}
}

type headerTransport struct {
	rt          http.RoundTripper
	name, value string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(t.name, t.value)
	return t.rt.RoundTrip(r)
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections
// still reaches the transport.
func (t headerTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
