package rpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// With a cluster secret, the manager's RPC serves only callers that present
// it: the submit stream, the reads and every other HTTP route.
func TestClusterSecret(t *testing.T) {
	svc := &fakeManager{leader: true}
	addr, srv := serveConfig(t, svc, ServerConfig{Secret: "s3cret"})
	srv.Mux().HandleFunc("GET /extra", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "k1", Job: &rpcpb.JobRequest{Type: "x"}}

	for name, secret := range map[string]string{"no secret": "", "a wrong secret": "s3cre7"} {
		c := NewClient(ClientConfig{Resolver: StaticResolver([]string{addr}), AttemptTimeout: time.Minute, Secret: secret})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := c.Submit(ctx, req)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated {
			t.Errorf("%s: a submission answered %v, want %s", name, err, CodeUnauthenticated)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		_, err = c.GetJob(ctx, "t", "j-k1")
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated {
			t.Errorf("%s: read answered %v, want %s", name, err, CodeUnauthenticated)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		_, err = c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l"})
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated {
			t.Errorf("%s: a worker call answered %v, want %s", name, err, CodeUnauthenticated)
		}
		cancel()
		c.Close()
		if code := getWithSecret(t, "http://"+addr+"/extra", secret); code != http.StatusUnauthorized {
			t.Errorf("%s: a route added to the mux answered %d, want 401", name, code)
		}
	}
	if n := svc.submits.Load(); n != 0 {
		t.Fatalf("the service saw %d submissions from callers without the secret", n)
	}

	c := NewClient(ClientConfig{Resolver: StaticResolver([]string{addr}), AttemptTimeout: time.Minute, Secret: "s3cret"})
	defer c.Close()
	if _, err := c.Submit(context.Background(), req); err != nil {
		t.Fatalf("with the secret: %v", err)
	}
	// The HTTP side serves the status with the secret.
	if code := getWithSecret(t, "http://"+addr+"/rpc/v1/status", "s3cret"); code != http.StatusOK {
		t.Errorf("with the secret, GET /rpc/v1/status answered %d", code)
	}
	if _, err := c.GetJob(context.Background(), "t", "j-k1"); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == CodeUnauthenticated {
			t.Fatalf("with the secret, the read was refused: %v", err)
		}
	}
}

// A secret matches only itself: not a value shorter, longer or of its
// length, nor a prefix of it, nor nothing. The comparison is of SHA-256
// digests, so its time depends on neither length (no timing test: it would
// be flaky; secretDigest's doc states the contract).
func TestSecretDigestMatchesOnlyTheSecret(t *testing.T) {
	const secret = "s3cret-0123456789"
	wrong := map[string]string{
		"empty":           "",
		"shorter":         "s3cret",
		"a prefix":        secret[:len(secret)-1],
		"of equal length": "s3cret-0123456788",
		"longer":          secret + "0",
		"much longer":     strings.Repeat(secret, 8),
	}
	d := newSecretDigest(secret)
	if !d.matches(secret) {
		t.Fatal("the secret does not match itself")
	}
	for name, v := range wrong {
		if d.matches(v) {
			t.Errorf("%s (%q) matches", name, v)
		}
	}
	// requireSecret compares "Bearer <secret>" so: the HTTP routes and
	// the gRPC interceptor share the helper.
	h := requireSecret(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }), secret)
	get := func(header string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set(secretHeader, header)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := get(bearer(secret)); code != http.StatusOK {
		t.Fatalf("with the secret: %d, want 200", code)
	}
	for name, v := range wrong {
		if code := get(bearer(v)); code != http.StatusUnauthorized {
			t.Errorf("%s (%q): %d, want 401", name, v, code)
		}
	}
	if code := get(secret); code != http.StatusUnauthorized {
		t.Errorf("the secret without \"Bearer \": %d, want 401", code)
	}
}

// getWithSecret GETs url presenting secret as the managers' HTTP routes read
// it (none when empty) and returns the status code.
func getWithSecret(t *testing.T, url, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set(secretHeader, bearer(secret))
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Every method of both services, whatever its kind (unary, server, client
// or bidirectional stream), read from the services' descriptors so that a
// method added later is covered; a service or method the listener does not
// serve (gRPC reflection and health included); and the HTTP/1.1 side,
// "OPTIONS *" included, which net/http answers itself unless told not to:
// without the cluster secret, or with a wrong one, each is refused
// unauthenticated before anything else answers, so that a caller without
// the credential learns nothing, not even which methods exist. With the
// cluster secret alone every Operator method is refused forbidden. Neither
// secret appears in the server's logs.
func TestNothingAnswersWithoutTheCredential(t *testing.T) {
	const cluster, operator = "cluster-secret-0123456789", "operator-secret-0123456789"
	logs := &testutil.Buffer{}
	op := &fakeOperator{}
	addr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: cluster, Operator: op, OperatorAuth: OperatorAuth{Secret: operator},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), ErrorLog: log.New(logs, "", 0)})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var methods []string
	for _, sd := range []grpc.ServiceDesc{rpcpb.Manager_ServiceDesc, rpcpb.Operator_ServiceDesc} {
		for _, m := range sd.Methods {
			methods = append(methods, "/"+sd.ServiceName+"/"+m.MethodName)
		}
		for _, s := range sd.Streams {
			methods = append(methods, "/"+sd.ServiceName+"/"+s.StreamName)
		}
	}
	unknown := []string{"/once.rpc.v1.Manager/NoSuchMethod", "/once.rpc.v1.Operator/NoSuchMethod", "/once.rpc.v1.NoSuchService/Call",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
		"/grpc.health.v1.Health/Check"}
	// call opens a stream of any kind: every method can be called so, and
	// the answer is the status that ends it.
	call := func(method string, md metadata.MD) codes.Code {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 5*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
		if err == nil {
			_ = st.SendMsg(&rpcpb.MembersRequest{}) // an empty message: any request type decodes it
			_ = st.CloseSend()
			for err == nil {
				err = st.RecvMsg(&rpcpb.MembersResponse{})
			}
		}
		return status.Code(err)
	}
	for name, md := range map[string]metadata.MD{
		"no credential":            nil,
		"a wrong secret":           metadata.Pairs(secretHeader, bearer(cluster[:len(cluster)-1]+"8")),
		"a bare secret":            metadata.Pairs(secretHeader, cluster),
		"only the operator secret": metadata.Pairs(OperatorSecretMetadata, operator),
	} {
		for _, m := range append(methods, unknown...) {
			if code := call(m, md); code != codes.Unauthenticated {
				t.Errorf("%s: %s answered %s, want %s", name, m, code, codes.Unauthenticated)
			}
		}
	}
	// The cluster secret alone: every Operator method, and one it does not
	// have, is forbidden (the Manager service's answers are the fake's).
	for _, m := range append(methods, "/once.rpc.v1.Operator/NoSuchMethod") {
		if !strings.HasPrefix(m, operatorServicePrefix) {
			continue
		}
		if code := call(m, metadata.Pairs(secretHeader, bearer(cluster))); code != codes.PermissionDenied {
			t.Errorf("the cluster secret alone: %s answered %s, want %s", m, code, codes.PermissionDenied)
		}
	}
	// A path without its leading slash, which the interceptor's prefix
	// would not match, never reaches the Operator service (gRPC refuses it
	// as malformed since v1.79.3; the count below shows it).
	if code := call("once.rpc.v1.Operator/Members", metadata.Pairs(secretHeader, bearer(cluster))); code == codes.OK {
		t.Errorf("the cluster secret alone: Operator/Members without its leading slash answered %s", code)
	}
	if code := call("/once.rpc.v1.NoSuchService/Call", metadata.Pairs(secretHeader, bearer(cluster))); code != codes.Unimplemented {
		t.Errorf("the cluster secret: an unknown service answered %s, want %s", code, codes.Unimplemented)
	}
	if n := op.calls.Load(); n != 0 {
		t.Fatalf("%d operator calls reached the operator without the operator credential", n)
	}

	// The HTTP/1.1 side: every route, and the server-wide OPTIONS.
	for _, target := range []string{"/rpc/v1/status", "/metrics", "/", "/debug/pprof/", "*"} {
		for _, method := range []string{http.MethodGet, http.MethodOptions, http.MethodPost} {
			if code := rawHTTP(t, addr, method, target, ""); code != http.StatusUnauthorized {
				t.Errorf("%s %s without the secret answered %d, want 401", method, target, code)
			}
			if code := rawHTTP(t, addr, method, target, cluster+"x"); code != http.StatusUnauthorized {
				t.Errorf("%s %s with a wrong secret answered %d, want 401", method, target, code)
			}
		}
	}
	for _, s := range []string{cluster, operator} {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("a secret is in the logs:\n%s", logs.String())
		}
	}
}

// rawHTTP sends one HTTP/1.1 request line (target as is: "*" or a path)
// with the secret in the header unless empty, and returns the status code.
func rawHTTP(t *testing.T, addr, method, target, secret string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 0\r\nConnection: close\r\n"
	if secret != "" {
		req += "Authorization: " + bearer(secret) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
