//go:build unix

// The Raft log's lock is an flock, which walstore takes on unix only (the
// manager runs on Linux): this file is built where the lock exists.

package managerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/internal/walstore"
)

// TestMainRefusesADataDirWhoseRaftLogIsOpen: a manager started on a data
// directory whose Raft log another store holds open (a manager process
// still running there) exits 1 with the message of docs/operations.md and
// changes nothing in the directory: it does not get as far as the ledger,
// the federation's files or the WAN pool.
func TestMainRefusesADataDirWhoseRaftLogIsOpen(t *testing.T) {
	dataDir := t.TempDir()
	ws, err := walstore.Open(filepath.Join(dataDir, "raft", "wal"), walstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	before := listTree(t, dataDir)

	env, _ := soloManagerEnv(t, dataDir, manager.EnvWANGossipAddr+fmt.Sprintf("=127.0.0.1:%d", testutil.FreePort(t)))
	var stderr bytes.Buffer
	joined := false
	opts := Options{WrapWANTransport: func(tr memberlist.NodeAwareTransport) memberlist.NodeAwareTransport { joined = true; return tr }}
	if code := MainWith(context.Background(), nil, env, io.Discard, &stderr, opts); code != config.ExitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, config.ExitFailure, stderr.String())
	}
	want := "manager: open raft log: walstore: lock " + filepath.Join(dataDir, "raft", "wal") + ": walstore: locked by another open store"
	if !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if joined {
		t.Error("the refused start joined the WAN pool")
	}
	if after := listTree(t, dataDir); after != before {
		t.Fatalf("the refused start changed the data directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestMainHoldsTheRaftLogBeforeJoiningTheWANPool: a manager holds its Raft
// log's lock before it joins the WAN pool under its node's name, so of two
// processes started at once on one data directory only the one holding the
// lock ever joins: a rival that tries the lock at the instant of the join is
// refused (walstore.ErrLocked), and the manager goes on to a clean stop.
func TestMainHoldsTheRaftLogBeforeJoiningTheWANPool(t *testing.T) {
	dataDir := t.TempDir()
	wal := filepath.Join(dataDir, "raft", "wal")
	env, _ := soloManagerEnv(t, dataDir, manager.EnvWANGossipAddr+fmt.Sprintf("=127.0.0.1:%d", testutil.FreePort(t)))
	rival := make(chan error, 1)
	wrap := func(tr memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		ws, err := walstore.Open(wal, walstore.Options{})
		if err == nil {
			t.Cleanup(func() { _ = ws.Close() })
		}
		rival <- err
		return tr
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	logs := &testutil.Buffer{}
	go func() { exit <- MainWith(ctx, nil, env, io.Discard, logs, Options{WrapWANTransport: wrap}) }()
	err := <-rival
	cancel()
	code := <-exit
	if !errors.Is(err, walstore.ErrLocked) {
		t.Fatalf("a rival's open of the Raft log as the manager joined the WAN pool = %v, want walstore.ErrLocked", err)
	}
	if code != config.ExitOK {
		t.Fatalf("exit %d after shutdown; log:\n%s", code, logs.String())
	}
}

// TestMainReleasesTheDataDirWhenTheWANPoolCannotStart: a manager whose WAN
// pool cannot start (its address taken) exits 1 and closes the stores it had
// opened: the Raft log's lock is free again when Main returns.
func TestMainReleasesTheDataDirWhenTheWANPoolCannotStart(t *testing.T) {
	dataDir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	env, _ := soloManagerEnv(t, dataDir, manager.EnvWANGossipAddr+"="+taken.Addr().String())
	var stderr bytes.Buffer
	if code := Main(context.Background(), nil, env, io.Discard, &stderr); code != config.ExitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, config.ExitFailure, stderr.String())
	}
	if !strings.Contains(stderr.String(), "wan membership") {
		t.Fatalf("stderr does not say the WAN pool failed:\n%s", stderr.String())
	}
	ws, err := walstore.Open(filepath.Join(dataDir, "raft", "wal"), walstore.Options{})
	if err != nil {
		t.Fatalf("the Raft log after the failed start: %v", err)
	}
	_ = ws.Close()
}
