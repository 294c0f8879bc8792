package managerd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

func TestOperatorAuth(t *testing.T) {
	dir := t.TempDir()
	write := func(name, secret string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const cluster = "cluster-secret-0123456789"
	opFile := write("operator", "operator-secret-0123456789")
	log := testutil.Logger(t)
	for _, tc := range []struct {
		name          string
		file, cluster string
		fileTLS       bool
		insecure      bool
		want          rpc.OperatorAuth
	}{
		{name: "operator secret", file: opFile, cluster: cluster, want: rpc.OperatorAuth{Secret: "operator-secret-0123456789"}},
		{name: "operator secret and TLS files", file: opFile, cluster: cluster, fileTLS: true,
			want: rpc.OperatorAuth{Secret: "operator-secret-0123456789", Certificates: true}},
		{name: "TLS files: certificates only", fileTLS: true, cluster: cluster, want: rpc.OperatorAuth{Certificates: true}},
		// The secret alone: TLS with the derived CA, whose certificates
		// are never an operator's.
		{name: "cluster secret only: closed", cluster: cluster, want: rpc.OperatorAuth{}},
		{name: "insecure: open", insecure: true, want: rpc.OperatorAuth{Insecure: true}},
	} {
		got, err := operatorAuth(manager.Config{OperatorSecretFile: tc.file, Insecure: tc.insecure}, tc.cluster, tc.fileTLS, log)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	_, err := operatorAuth(manager.Config{OperatorSecretFile: write("same", cluster)}, cluster, false, log)
	if !errors.Is(err, ErrOperatorSecretReused) || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("the cluster secret as operator secret: %v, want ErrOperatorSecretReused", err)
	}
	_, err = operatorAuth(manager.Config{OperatorSecretFile: write("short", "short")}, cluster, false, log)
	if !errors.Is(err, config.ErrSecretFile) {
		t.Fatalf("a short operator secret: %v, want config.ErrSecretFile", err)
	}
}
