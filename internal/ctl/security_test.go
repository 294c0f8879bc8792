package ctl

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpctest"
)

// oncectl refuses to call managers without a credential unless --insecure
// is given, and refuses --insecure together with a credential; nothing is
// sent (the managers' address is not listening).
func TestMainRefusesWithoutCredential(t *testing.T) {
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	t.Setenv(EnvInsecure, "")
	t.Setenv(EnvOperatorSecretFile, "")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no credential", nil, []string{"--cluster-secret-file", "--cacert", "--insecure"}},
		{"insecure with a secret", []string{"--insecure", "--cluster-secret-file", secret}, []string{"--insecure", "--cluster-secret-file"}},
		{"insecure with an operator secret", []string{"--insecure", "--operator-secret-file", secret}, []string{"--insecure", "--operator-secret-file"}},
		{"half TLS", []string{"--cacert", "ca.pem"}, []string{"--cert"}},
	} {
		var stderr bytes.Buffer
		args := append([]string{"--managers", "127.0.0.1:1", "raft", "peers"}, tc.args...)
		if code := Main(context.Background(), args, io.Discard, &stderr); code != ExitUsage {
			t.Fatalf("%s: exit %d, want %d; stderr %s", tc.name, code, ExitUsage, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q does not name %s", tc.name, stderr.String(), w)
			}
		}
	}
	// With --insecure alone it goes on and fails to reach the manager.
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--managers", "127.0.0.1:1", "--insecure", "raft", "peers"}, io.Discard, &stderr); code != ExitFailure {
		t.Fatalf("--insecure: exit %d, want %d; stderr %s", code, ExitFailure, stderr.String())
	}
}

// oncectl against a manager secured by the cluster secret, with a
// credential the manager does not accept: another cluster secret, or
// --insecure. It fails at once, exit 1, with the handshake's reason (not a
// deadline: --timeout is long, and a hang would end there instead), and
// sends nothing the manager serves; with the right secret it is answered.
func TestManagerCommandsWithAWrongCredential(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	t.Setenv(EnvInsecure, "")
	c := managertest.Start(t, managertest.Options{Managers: 1})
	const secret = "0123456789abcdef0123456789abcdef"
	cluster, err := certs.ClusterFromSecret(secret, certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	// The manager's RPC as managerd serves it secured by the secret alone.
	addr := rpctest.Listen(t, rpc.NewServer(c.Managers[0], rpc.ServerConfig{Secret: secret, TLS: cluster.ServerConfig()}))
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	right, wrong := write("right", secret+"\n"), write("wrong", "another-secret-0123456789abcdef\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"another secret, status", []string{"--cluster-secret-file", wrong, "cluster", "status"}, "authentication handshake failed"},
		{"another secret, peers", []string{"--cluster-secret-file", wrong, "raft", "peers"}, "authentication handshake failed"},
		{"insecure", []string{"--insecure", "raft", "peers"}, "no manager answered"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--managers", addr, "--timeout", "60s"}, tc.args...), &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != ExitFailure || !strings.Contains(out, tc.want) || strings.Contains(out, "deadline") {
			t.Errorf("%s: exit %d, output %q; want exit %d naming %q, not a deadline", tc.name, code, out, ExitFailure, tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--managers", addr, "--cluster-secret-file", right, "cluster", "status"}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("the right secret: exit %d; %s%s", code, stdout.String(), stderr.String())
	}
}

// The gates' token from ONCE_TOKEN is sent, and never printed: --help
// shows no default taken from the environment (it did, as the flag's
// default); --token given wins over it.
func TestTokenFromTheEnvironmentIsNotPrinted(t *testing.T) {
	const token = "tok-from-env-0123456789"
	t.Setenv(EnvToken, token)
	seen := make(chan string, 4)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"not found","status":404,"code":"job_not_found"}`)
	}))
	defer gate.Close()
	for _, args := range [][]string{{"--help"}, {"job", "get", "--help"}} {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), args, &stdout, &stderr); code != ExitOK {
			t.Fatalf("%v: exit %d; %s", args, code, stderr.String())
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, token) {
			t.Errorf("%v prints the token of %s:\n%s", args, EnvToken, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Bearer " + token},
		{[]string{"--token", "tok-flag"}, "Bearer tok-flag"},
	} {
		args := append([]string{"--gates", gate.URL, "job", "get", "00000000-0000-8000-8000-000000000000"}, tc.args...)
		Main(context.Background(), args, io.Discard, io.Discard)
		if got := <-seen; got != tc.want {
			t.Errorf("%v: the gate got Authorization %q, want %q", tc.args, got, tc.want)
		}
	}
}

// ONCE_INSECURE takes the booleans the daemons' MANAGER_INSECURE takes, and
// refuses another value (exit 2, naming the variable) instead of reading it
// as false; --insecure given on the command line wins over it.
func TestInsecureVariable(t *testing.T) {
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	t.Setenv(EnvOperatorSecretFile, "")
	run := func(env string, args ...string) (int, string) {
		t.Helper()
		t.Setenv(EnvInsecure, env)
		var stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--managers", "127.0.0.1:1", "--timeout", "1m"}, append(args, "raft", "peers")...), io.Discard, &stderr)
		return code, stderr.String()
	}
	// Insecure: it goes on and fails to reach the manager (exit 1).
	for _, v := range []string{"true", "1", "yes", "TRUE", " on "} {
		if code, stderr := run(v); code != ExitFailure {
			t.Errorf("%s=%q: exit %d, want %d (insecure, unreachable manager); stderr %s", EnvInsecure, v, code, ExitFailure, stderr)
		}
	}
	// Secure, with no credential: refused before anything is sent.
	for _, v := range []string{"", "false", "0", "no"} {
		if code, stderr := run(v); code != ExitUsage || !strings.Contains(stderr, "--cluster-secret-file") {
			t.Errorf("%s=%q: exit %d, want %d asking for a credential; stderr %s", EnvInsecure, v, code, ExitUsage, stderr)
		}
	}
	if code, stderr := run("ture"); code != ExitUsage || !strings.Contains(stderr, EnvInsecure) {
		t.Errorf("%s=ture: exit %d, want %d naming %s; stderr %s", EnvInsecure, code, ExitUsage, EnvInsecure, stderr)
	}
	if code, stderr := run("ture", "--insecure=false"); code != ExitUsage || !strings.Contains(stderr, "--cluster-secret-file") {
		t.Errorf("--insecure=false over %s=ture: exit %d, want %d asking for a credential; stderr %s", EnvInsecure, code, ExitUsage, stderr)
	}
}
