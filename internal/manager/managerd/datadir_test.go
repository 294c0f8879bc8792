package managerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/testutil"
)

// listTree is every path under dir with its size and modification time.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		fmt.Fprintf(&b, "%s %d %d\n", path, size, info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// startAndStop runs a manager with env until it leads its datacenter, then
// stops it; it fails the test unless the manager exits 0. It returns the
// manager's log.
func startAndStop(t *testing.T, env []string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, exit, logs := runUntilLeader(t, ctx, env)
	cancel()
	if code := <-exit; code != config.ExitOK {
		t.Fatalf("exit %d after the stop; log:\n%s", code, logs.String())
	}
	return logs.String()
}

// runUntilLeader runs MainWith(env) until ctx ends and waits until its
// manager leads its datacenter; it returns the manager, the channel its
// exit code arrives on and its log. It fails the test if Main exits first.
func runUntilLeader(t *testing.T, ctx context.Context, env []string) (*manager.Manager, <-chan int, *testutil.Buffer) {
	t.Helper()
	mc := make(chan *manager.Manager, 1)
	exit := make(chan int, 1)
	logs := &testutil.Buffer{}
	go func() {
		exit <- MainWith(ctx, nil, env, io.Discard, logs, Options{Mount: func(_ *http.ServeMux, m *manager.Manager) { mc <- m }})
	}()
	var m *manager.Manager
	select {
	case m = <-mc:
	case code := <-exit:
		t.Fatalf("Main exited %d; log:\n%s", code, logs.String())
	}
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		err := m.CheckLeader()
		return err == nil, fmt.Sprint(err)
	})
	return m, exit, logs
}

// refusedStart runs a manager with env, which must refuse to start: it
// returns the exit code and stderr. A manager that gets as far as serving
// fails the test and is stopped at once.
func refusedStart(t *testing.T, env []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.Buffer
	started := false
	code := MainWith(ctx, nil, env, io.Discard, &stderr, Options{Mount: func(*http.ServeMux, *manager.Manager) {
		started = true
		cancel()
	}})
	if started {
		t.Errorf("the manager started; log:\n%s", stderr.String())
	}
	return code, stderr.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMainRefusesADataDirOfAnotherNodeOrDatacenter: a manager writes its
// identity file on its first start; started again on that directory as
// another node, or in another datacenter, it exits 2 with a message naming
// the file, what it holds and what the configuration says, before it
// changes anything in the directory; started again as itself it starts.
func TestMainRefusesADataDirOfAnotherNodeOrDatacenter(t *testing.T) {
	dataDir := t.TempDir()
	env, _ := soloManagerEnv(t, dataDir)
	startAndStop(t, env)
	path := filepath.Join(dataDir, IdentityFile)
	if got, want := string(readFile(t, path)), `{"node_id":"m1","datacenter":"dc1"}`+"\n"; got != want {
		t.Fatalf("%s holds %q, want %q", path, got, want)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", path, info, err)
	}
	before := listTree(t, dataDir)

	for _, c := range []struct {
		setting string
		want    string
	}{
		{manager.EnvNodeID + "=m2", `names node "m1" of datacenter "dc1", the configuration node "m2" (MANAGER_NODE_ID) of datacenter "dc1"`},
		{manager.EnvDatacenter + "=dc2", `names node "m1" of datacenter "dc1", the configuration node "m1" (MANAGER_NODE_ID) of datacenter "dc2"`},
	} {
		code, stderr := refusedStart(t, append(env, c.setting))
		if code != config.ExitConfig {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", c.setting, code, config.ExitConfig, stderr)
		}
		want := "manager: data directory belongs to another manager: " + path + " " + c.want
		if !strings.Contains(stderr, strings.ReplaceAll(want, `"`, `\"`)) {
			t.Errorf("%s: stderr lacks %q:\n%s", c.setting, want, stderr)
		}
		if after := listTree(t, dataDir); after != before {
			t.Fatalf("%s: the refused start changed the data directory:\nbefore:\n%s\nafter:\n%s", c.setting, before, after)
		}
	}
	startAndStop(t, env)
}

// TestMainRefusesADamagedIdentityFile: a manager whose data directory holds
// an identity file it cannot decode exits 1 naming the file, and leaves the
// file as it was.
func TestMainRefusesADamagedIdentityFile(t *testing.T) {
	for _, content := range []string{"", `{"node_id":"m1","data`, `{"node_id":"m1"}`, "m1\n"} {
		dataDir := t.TempDir()
		path := filepath.Join(dataDir, IdentityFile)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		env, _ := soloManagerEnv(t, dataDir)
		code, stderr := refusedStart(t, env)
		if code != config.ExitFailure {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", content, code, config.ExitFailure, stderr)
		}
		if want := "manager: data directory identity " + path + " unreadable: "; !strings.Contains(stderr, want) {
			t.Errorf("%q: stderr lacks %q:\n%s", content, want, stderr)
		}
		if got := string(readFile(t, path)); got != content {
			t.Errorf("the refused start rewrote %s: %q, was %q", path, got, content)
		}
	}
}

// TestMainAdoptsADataDirWithoutIdentity: a data directory with Raft state
// but no identity file (one of a build before the file) is adopted: the
// manager starts on it, says so, and writes the file, which then refuses
// another node.
func TestMainAdoptsADataDirWithoutIdentity(t *testing.T) {
	dataDir := t.TempDir()
	env, _ := soloManagerEnv(t, dataDir)
	startAndStop(t, env)
	path := filepath.Join(dataDir, IdentityFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	logs := startAndStop(t, env)
	if want := `msg="data directory identity written: a directory of a build before the file is adopted" role=manager file=` + path + " node_id=m1 dc=dc1"; !strings.Contains(logs, want) {
		t.Errorf("log lacks %q:\n%s", want, logs)
	}
	if got, want := string(readFile(t, path)), `{"node_id":"m1","datacenter":"dc1"}`+"\n"; got != want {
		t.Fatalf("%s holds %q, want %q", path, got, want)
	}
	if code, stderr := refusedStart(t, append(env, manager.EnvNodeID+"=m2")); code != config.ExitConfig {
		t.Fatalf("m2 on the adopted directory: exit %d, want %d; stderr:\n%s", code, config.ExitConfig, stderr)
	}
}

// TestClaimDataDirErrors: the refusals are typed: another identity is a
// *ForeignDataDirError matching config.ErrInvalid, a file that cannot be
// read an *IdentityFileError wrapping the cause.
func TestClaimDataDirErrors(t *testing.T) {
	dataDir := t.TempDir()
	cfg := manager.Config{NodeID: "m1", Datacenter: "dc1", DataDir: dataDir}
	log := testutil.Logger(t)
	if err := claimDataDir(cfg, log); err != nil {
		t.Fatal(err)
	}
	if err := claimDataDir(cfg, log); err != nil {
		t.Fatalf("the same identity again: %v", err)
	}
	other := cfg
	other.NodeID = "m2"
	var foreign *ForeignDataDirError
	err := claimDataDir(other, log)
	if !errors.As(err, &foreign) || !errors.Is(err, config.ErrInvalid) ||
		foreign.Found != (DataDirIdentity{"m1", "dc1"}) || foreign.Configured != (DataDirIdentity{"m2", "dc1"}) {
		t.Fatalf("another node: %#v", err)
	}
	path := filepath.Join(dataDir, IdentityFile)
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	var damaged *IdentityFileError
	var syntax *json.SyntaxError
	if err := claimDataDir(cfg, log); !errors.As(err, &damaged) || damaged.Path != path || !errors.As(err, &syntax) ||
		errors.Is(err, config.ErrInvalid) {
		t.Fatalf("a damaged file: %#v", err)
	}
}
