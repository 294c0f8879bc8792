package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The operator role (docs/security.md, "Operator role"). The cluster secret
// and the cluster certificates say a caller belongs to the cluster: a gate,
// another manager, oncectl. What administers the cluster (the Operator
// service, rpcpb.Operator: snapshot save and restore, Raft peer changes,
// leadership transfer, the gossip keyring, the pool's members) asks for
// more: an operator credential, either
//
//   - the operator secret (MANAGER_OPERATOR_SECRET_FILE), which oncectl sends
//     in the OperatorSecretMetadata gRPC metadata, compared by digest in
//     constant time (secretDigest); or
//   - a client certificate that carries the URI SAN OperatorRoleURI, signed
//     by a cluster CA the operator supplied (MANAGER_TLS_*). A certificate
//     of the CA derived from the cluster secret never is one: every gate
//     holds the secret and could sign itself any role.
//
// Anything else is answered CodeForbidden (PERMISSION_DENIED) before the
// method runs (operatorInterceptors), except on a manager in insecure mode
// (MANAGER_INSECURE), where every method is open. The client certificate is
// the one the listener's TLS handshake verified (listenerCredentials).

// OperatorSecretMetadata is the gRPC metadata key that carries the operator
// secret.
const OperatorSecretMetadata = "once-operator-secret"

// OperatorRoleURI is the URI SAN of an operator's client certificate.
const OperatorRoleURI = certs.RolePrefix + string(certs.RoleOperator)

// OperatorAuth is what the Operator service accepts.
type OperatorAuth struct {
	// Secret is the operator secret ("" none).
	Secret string
	// Certificates accepts a client certificate with the operator role. Set
	// it only when the listener verifies callers against a CA the operator
	// supplied (certificate files), never the CA derived from the cluster
	// secret (certs.Cluster.Derived).
	Certificates bool
	// Insecure opens the Operator service to every caller: the manager runs
	// in insecure mode (MANAGER_INSECURE), its whole listener open to
	// whoever reaches it.
	Insecure bool
}

// operatorServicePrefix starts the full name of every Operator method: the
// operator interceptors check those, and let every other call pass.
var operatorServicePrefix = "/" + rpcpb.Operator_ServiceDesc.ServiceName + "/"

// errOperatorForbidden is the answer to a caller without an operator
// credential.
var errOperatorForbidden = &Error{Code: CodeForbidden, Message: "an operator credential is required (the operator secret in the " +
	OperatorSecretMetadata + " metadata, or a client certificate with the URI SAN " + OperatorRoleURI + ")"}

// allows reports whether the call of ctx carries an operator credential;
// secret is the digest of a.Secret.
func (a OperatorAuth) allows(ctx context.Context, secret *secretDigest) bool {
	if a.Insecure {
		return true
	}
	if a.Secret != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(OperatorSecretMetadata); len(v) == 1 && v[0] != "" && secret.matches(v[0]) {
			return true
		}
	}
	// The listener verified the chain against the cluster CA during the
	// handshake (RequireAndVerifyClientCert); the role is the leaf's.
	if !a.Certificates {
		return false
	}
	r, ok, err := peerRole(ctx)
	return ok && err == nil && r == certs.RoleOperator // the operator role, and no other
}

// operatorInterceptors refuse a call of an Operator method without an
// operator credential (PERMISSION_DENIED, with CodeForbidden in its
// details, as every error of the service); the Manager service's calls pass
// untouched. They run after the cluster secret's (secretInterceptors).
func operatorInterceptors(auth OperatorAuth) []grpc.ServerOption {
	secret := newSecretDigest(auth.Secret)
	return checkInterceptors(func(ctx context.Context, method string) error {
		if !strings.HasPrefix(method, operatorServicePrefix) || auth.allows(ctx, &secret) {
			return nil
		}
		return pbErrorStatus(toPBError(errOperatorForbidden, nil)) // an *Error: nothing to log
	})
}

// errCarriedByNonManager answers a carried submission (SubmitRequest's
// carried or carrier) from a caller whose certificate names another role
// than the manager's.
var errCarriedByNonManager = &Error{Code: CodeForbidden, Message: "a carried submission (carried, carrier) is sent only by " +
	"another datacenter's manager: the caller's certificate must carry the URI SAN " + certs.RolePrefix + string(certs.RoleManager) + " or no role"}

// mayCarry reports whether the caller of ctx may send carried submissions,
// which only another datacenter's outbox sends (docs/multidc.md): a caller
// whose client certificate names a role may if that role is the manager's;
// one whose certificate names none (a CA issued without roles: all its
// certificates are equal), or a caller without a certificate (a listener
// without TLS: insecure mode, where everything is open), may. A gate's
// certificate (the gate role, derived from the secret or issued from
// files) or an operator's may not: a gate forwards its clients'
// submissions, never a carried one, and a carried submission is exempt
// from the outbox's bound and makes the receiver take its carrier for
// confirmed.
func mayCarry(ctx context.Context) bool {
	r, ok, err := peerRole(ctx)
	return !ok || err == nil && (r == "" || r == certs.RoleManager)
}

// peerRole returns the role of the client certificate the caller presented
// (the TLS state listenerCredentials gave the connection); ok is false
// when it presented none.
func peerRole(ctx context.Context) (r certs.Role, ok bool, err error) {
	p, _ := grpcpeer.FromContext(ctx)
	if p == nil {
		return "", false, nil
	}
	if info, isTLS := p.AuthInfo.(credentials.TLSInfo); isTLS && len(info.State.PeerCertificates) > 0 {
		r, err = certs.RoleOf(info.State.PeerCertificates[0])
		return r, true, err
	}
	return "", false, nil
}

// listenerCredentials are the gRPC server's transport credentials. The TLS
// handshake happens before cmux sees a connection (Server.Serve wraps the
// listener with tls.NewListener), so gRPC does none: ServerHandshake hands
// the connection back as it is and, when it is TLS, its verified state as
// the call's credentials.TLSInfo (peer.FromContext), which is where the
// operator interceptor reads the client certificate.
type listenerCredentials struct{ tls bool }

// errServerCredentials: listenerCredentials never dial.
var errServerCredentials = errors.New("rpc: the listener's credentials cannot dial")

func (listenerCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errServerCredentials
}

func (listenerCredentials) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if tc := tlsConnOf(c); tc != nil {
		return c, credentials.TLSInfo{State: tc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, plainAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (l listenerCredentials) Info() credentials.ProtocolInfo {
	if l.tls {
		return credentials.ProtocolInfo{SecurityProtocol: "tls"}
	}
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (l listenerCredentials) Clone() credentials.TransportCredentials { return l }

func (listenerCredentials) OverrideServerName(string) error { return nil }

// plainAuthInfo is a connection's AuthInfo without TLS.
type plainAuthInfo struct{ credentials.CommonAuthInfo }

func (plainAuthInfo) AuthType() string { return "insecure" }

// tlsConnOf returns the *tls.Conn under cmux's wrapper, nil for a plain
// connection.
func tlsConnOf(c net.Conn) *tls.Conn {
	for {
		switch x := c.(type) {
		case *tls.Conn:
			return x
		case *cmux.MuxConn:
			c = x.Conn
		default:
			return nil
		}
	}
}
