package rpc

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"

	"github.com/soheilhy/cmux"

	"github.com/once-dev/once/internal/certs"
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
//   - a client certificate that carries the URI SAN OperatorRoleURI, signed
//     by a cluster CA the operator supplied (MANAGER_TLS_*). A certificate
//     of the CA derived from the cluster secret never is one: every gate
//     holds the secret and could sign itself any role.
//
// Anything else is answered CodeForbidden (403) before the route runs, except
// on a manager in insecure mode (MANAGER_INSECURE), where every route is open.

// OperatorSecretHeader carries the operator secret.
const OperatorSecretHeader = "Once-Operator-Secret"

// OperatorRoleURI is the URI SAN of an operator's client certificate.
const OperatorRoleURI = certs.RolePrefix + string(certs.RoleOperator)

// HasOperatorRole reports whether cert carries the operator role, and no
// other (certs.RoleOf).
func HasOperatorRole(cert *x509.Certificate) bool {
	if cert == nil {
		return false
	}
	r, err := certs.RoleOf(cert)
	return err == nil && r == certs.RoleOperator
}

// OperatorAuth is what the operator routes accept.
type OperatorAuth struct {
	// Secret is the operator secret ("" none).
	Secret string
	// Certificates accepts a client certificate with the operator role. Set
	// it only when the listener verifies callers against a CA the operator
	// supplied (certificate files), never the CA derived from the cluster
	// secret (certs.Cluster.Derived).
	Certificates bool
	// Insecure opens the operator routes to every caller: the manager runs
	// in insecure mode (MANAGER_INSECURE), its whole listener open to
	// whoever reaches it.
	Insecure bool
}

// allows reports whether r carries an operator credential.
func (a OperatorAuth) allows(r *http.Request) bool {
	if a.Insecure {
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
	if !a.Certificates {
		return false
	}
	if peer := peerCertificates(r); len(peer) > 0 {
		return HasOperatorRole(peer[0])
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
