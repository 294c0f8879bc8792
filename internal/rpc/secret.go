package rpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The cluster secret (MANAGER_CLUSTER_SECRET_FILE, GATE_CLUSTER_SECRET_FILE;
// docs/security.md) authenticates callers of a manager's RPC listener when it
// is set: every HTTP request and every gRPC call carries
// "Authorization: Bearer <secret>", and the manager refuses one that does not
// (401 / codes.Unauthenticated) before reading anything else. It is one
// secret for the whole federation, as the gossip key is.

// secretHeader is where the secret travels (HTTP header, gRPC metadata key).
const secretHeader = "authorization"

func bearer(secret string) string { return "Bearer " + secret }

// secretDigest is a configured secret kept as its SHA-256 digest, computed
// once. matches compares digests, never the values: it hashes what a caller
// presents and compares the two 32-byte digests in constant time
// (subtle.ConstantTimeCompare). Compared directly, values of different
// lengths return at once, which tells a caller the secret's length; digests
// are always of one length, and how much of the secret a guess shares does
// not show in the time either.
type secretDigest [sha256.Size]byte

func newSecretDigest(secret string) secretDigest { return sha256.Sum256([]byte(secret)) }

// matches reports whether got is the secret.
func (d *secretDigest) matches(got string) bool {
	g := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(g[:], d[:]) == 1
}

// requireSecret wraps h so that a request without the secret is 401.
func requireSecret(h http.Handler, secret string) http.Handler {
	if secret == "" {
		return h
	}
	want := newSecretDigest(bearer(secret))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !want.matches(r.Header.Get(secretHeader)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="once-rpc"`)
			writeError(w, http.StatusUnauthorized, &Error{Code: CodeUnauthenticated, Message: "the cluster secret is missing or wrong"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// secretInterceptors refuse gRPC calls without the secret.
func secretInterceptors(secret string) []grpc.ServerOption {
	if secret == "" {
		return nil
	}
	want := newSecretDigest(bearer(secret))
	return checkInterceptors(func(ctx context.Context, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(secretHeader); len(v) == 1 && want.matches(v[0]) {
			return nil
		}
		return status.Error(codes.Unauthenticated, "the cluster secret is missing or wrong")
	})
}

// checkInterceptors run check on every call, streams and unary, before its
// handler (method is the call's full method name); a call it fails is
// answered its error.
func checkInterceptors(check func(ctx context.Context, method string) error) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
	}
}

// secretCredentials sends the secret with every gRPC call.
type secretCredentials string

func (s secretCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{secretHeader: bearer(string(s))}, nil
}

// RequireTransportSecurity is false: the secret is the authentication when
// the RPC runs without TLS (docs/security.md says what that protects).
func (secretCredentials) RequireTransportSecurity() bool { return false }
