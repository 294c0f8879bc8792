package ctl

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestBadInputIsExit2: a bad command line — a malformed --key, a keys file
// that cannot be used, a manager address without a port, a gate address
// without a host, a token with a newline, an empty argument, a flag given
// "" that would be taken for the flag not given (job list --type "" for
// every job, --key "" for a new key), a job work COMMAND that cannot be
// run, an archive that is a directory, a save into a missing directory — is
// a clear error and exit 2, with nothing sent. (A
// gossip KEY that is not one stays the manager's refusal, exit 1:
// TestOncectlGossipKeyring.)
func TestBadInputIsExit2(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	dir := t.TempDir()
	corrupt := writeTemp(t, dir, "corrupt-keys", "{not json")
	// A case that failed would otherwise write the user's own keys file.
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	t.Setenv("HOME", filepath.Join(dir, "home"))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"submit --key malformed", []string{"--gates", srv.URL, "submit", "--type", "t", "--key", "c:1:nothex"}, "--key"},
		{"submit --key with a space", []string{"--gates", srv.URL, "submit", "--type", "t", "--key", "a b"}, "--key"},
		{"job cancel --key malformed", []string{"--gates", srv.URL, "job", "cancel", "j-1", "--key", "c:x:0123456789abcdef"}, "--key"},
		{"job retry --key malformed", []string{"--gates", srv.URL, "job", "retry", "j-1", "--key", "c:1:0123"}, "--key"},
		{"submit --keys-file corrupt", []string{"--gates", srv.URL, "submit", "--type", "t", "--keys-file", corrupt}, "--keys-file"},
		{"submit --keys-file a directory", []string{"--gates", srv.URL, "submit", "--type", "t", "--keys-file", dir}, "--keys-file"},
		{"job cancel --keys-file corrupt", []string{"--gates", srv.URL, "job", "cancel", "j-1", "--keys-file", corrupt}, "--keys-file"},
		{"--gates without a host", []string{"--gates", "http://", "job", "get", "j-1"}, "--gates"},
		{"--gates an empty entry", []string{"--gates", srv.URL + ",", "job", "get", "j-1"}, "--gates"},
		{"--gates another scheme", []string{"--gates", "ftp://gate:21", "job", "get", "j-1"}, "--gates"},
		{"--managers without a port", []string{"--insecure", "--managers", "127.0.0.1", "cluster", "status"}, "127.0.0.1"},
		{"--managers a bad port", []string{"--insecure", "--managers", "127.0.0.1:http", "raft", "peers"}, "127.0.0.1:http"},
		{"--managers an empty entry", []string{"--insecure", "--managers", "127.0.0.1:7101,", "cluster", "status"}, "--managers"},
		{"job work a command not found", []string{"--gates", srv.URL, "job", "work", "--", filepath.Join(dir, "no-such-command")}, "no-such-command"},
		{"job work a command not executable", []string{"--gates", srv.URL, "job", "work", "--", corrupt}, "corrupt-keys"},
		{"job get an empty ID", []string{"--gates", srv.URL, "job", "get", ""}, "one job ID, got an empty argument"},
		{"job watch an empty ID", []string{"--gates", srv.URL, "job", "watch", ""}, "empty argument"},
		{"job cancel an empty ID", []string{"--gates", srv.URL, "job", "cancel", "", "--key", "c:1:0123456789abcdef"}, "empty argument"},
		{"job watch an empty datacenter", []string{"--gates", srv.URL, "job", "watch", "j-1", "--datacenters", "dc1,,dc2"}, "empty datacenter"},
		{"job watch --datacenters empty", []string{"--gates", srv.URL, "job", "watch", "j-1", "--datacenters", ""}, "empty datacenter"},
		{"job work --types empty", []string{"--gates", srv.URL, "job", "work", "--types", "", "--", "true"}, "empty type"},
		{"job work --types an empty entry", []string{"--gates", srv.URL, "job", "work", "--types", "email,", "--", "true"}, "empty type"},
		{"submit --datacenter empty", []string{"--gates", srv.URL, "submit", "--type", "t", "--key", "c.dc1:1:1:0123456789abcdef", "--datacenter", ""}, "empty datacenter"},
		{"submit --datacenter an empty entry", []string{"--gates", srv.URL, "submit", "--type", "t", "--key", "c.dc1:1:1:0123456789abcdef", "--datacenter", "dc1,"}, "empty datacenter"},
		{"submit --payload empty", []string{"--gates", srv.URL, "submit", "--type", "t", "--key", "c.dc1:1:1:0123456789abcdef", "--payload", ""}, "empty payload"},
		{"submit --key empty", []string{"--gates", srv.URL, "submit", "--type", "t", "--keys-file", filepath.Join(dir, "keys"), "--key", ""}, "empty idempotency key"},
		{"submit --keys-file empty", []string{"--gates", srv.URL, "submit", "--type", "t", "--keys-file", ""}, "--keys-file \"\": an empty file name"},
		{"job cancel --key empty", []string{"--gates", srv.URL, "job", "cancel", "j-1", "--keys-file", filepath.Join(dir, "keys"), "--key", ""}, "empty idempotency key"},
		{"job retry --key empty", []string{"--gates", srv.URL, "job", "retry", "j-1", "--keys-file", filepath.Join(dir, "keys"), "--key="}, "empty idempotency key"},
		{"job retry --keys-file empty", []string{"--gates", srv.URL, "job", "retry", "j-1", "--keys-file", ""}, "--keys-file \"\": an empty file name"},
		{"job list --type empty", []string{"--gates", srv.URL, "job", "list", "--type", ""}, "empty type"},
		{"job list --status empty", []string{"--gates", srv.URL, "job", "list", "--status", ""}, "empty status"},
		{"job list --state empty", []string{"--gates", srv.URL, "job", "list", "--state="}, "empty state"},
		{"job work --worker empty", []string{"--gates", srv.URL, "job", "work", "--worker", "", "--", "true"}, "empty worker name"},
		{"cluster view --operator-token-file empty", []string{"--gates", srv.URL, "cluster", "view", "--operator-token-file", ""}, "--operator-token-file \"\": an empty file name"},
		{"--token with a newline", []string{"--gates", srv.URL, "--token", "tok\n", "job", "get", "j-1"}, "--token"},
		{"key get an empty key", []string{"--gates", srv.URL, "key", "get", ""}, "empty argument"},
		{"raft remove-peer an empty ID", []string{"--insecure", "--managers", "127.0.0.1:1", "raft", "remove-peer", ""}, "empty argument"},
		{"raft transfer-leader an empty ID", []string{"--insecure", "--managers", "127.0.0.1:1", "raft", "transfer-leader", ""}, "empty argument"},
		{"snapshot restore an empty FILE", []string{"--insecure", "--managers", "127.0.0.1:1", "snapshot", "restore", ""}, "empty argument"},
		{"snapshot restore a directory", []string{"--insecure", "--managers", "127.0.0.1:1", "snapshot", "restore", dir}, dir},
		{"snapshot save into a missing directory", []string{"--insecure", "--managers", "127.0.0.1:1", "snapshot", "save", filepath.Join(dir, "none", "x.snap")}, "none"},
		{"snapshot save over a directory", []string{"--insecure", "--managers", "127.0.0.1:1", "snapshot", "save", dir}, dir},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := hits.Load()
			code, out, errOut := oncectl(t, append([]string{"--timeout", "2s"}, c.args...)...)
			if code != ExitUsage || !strings.Contains(errOut, c.want) || hits.Load() != before {
				t.Fatalf("exit %d (want %d), %d requests sent\nstdout: %s\nstderr: %s", code, ExitUsage, hits.Load()-before, out, errOut)
			}
		})
	}
	t.Run(EnvToken+" with a newline", func(t *testing.T) {
		t.Setenv(EnvToken, "s3cr3t\n")
		before := hits.Load()
		code, out, errOut := oncectl(t, "--gates", srv.URL, "--timeout", "2s", "job", "get", "j-1")
		if code != ExitUsage || !strings.Contains(errOut, EnvToken) || strings.Contains(errOut, "s3cr3t") || hits.Load() != before {
			t.Fatalf("exit %d (want %d), %d requests sent\nstdout: %s\nstderr: %s", code, ExitUsage, hits.Load()-before, out, errOut)
		}
	})
	if b, err := os.ReadFile(corrupt); err != nil || string(b) != "{not json" {
		t.Fatalf("the corrupt keys file was changed: %q %v", b, err)
	}
}

// TestDefaultKeysFileDirectory: without --keys-file the keys file is
// <user config dir>/oncectl/keys; the directories missing on the way are
// created private (0700) and made durable (atomicfile.MkdirAll), and the
// file is created in them.
func TestDefaultKeysFileDirectory(t *testing.T) {
	base := filepath.Join(t.TempDir(), "config")
	t.Setenv("XDG_CONFIG_HOME", base)
	t.Setenv("HOME", base) // where os.UserConfigDir looks outside Linux
	cfg, err := os.UserConfigDir()
	if err != nil {
		t.Fatal(err)
	}
	k, err := keysUnless("", "")
	if err != nil {
		t.Fatalf("keysUnless: %v", err)
	}
	if k.ClientID() == "" {
		t.Fatal("the keys have no client id")
	}
	for _, d := range []string{base, filepath.Join(cfg, "oncectl")} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, want a directory of mode 0700", d, fi.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(cfg, "oncectl", "keys")); err != nil {
		t.Fatalf("the keys file: %v", err)
	}
}

// TestUnknownSubcommandIsExit2: a command that only groups others (raft,
// job, cluster...) run with an argument that names none of them — a typo,
// `raft remove-peeer manager3` — is exit 2 naming the subcommands, never its
// help and exit 0, which a script would take for the change done; without an
// argument it prints its help, exit 0.
func TestUnknownSubcommandIsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"raft", "remove-peeer", "manager3"},
		{"raft", "bogus"},
		{"job", "cancle", "j-1"},
		{"cluster", "stats"},
		{"snapshot", "restor", "x.snap"},
		{"gossip", "keyring", "rotate", "k"},
		{"outbox", "forgot", "dc3"},
		{"key", "list"},
	} {
		code, out, errOut := oncectl(t, append([]string{"--insecure", "--managers", "127.0.0.1:1", "--gates", "http://127.0.0.1:1", "--timeout", "2s"}, args...)...)
		if code != ExitUsage || !strings.Contains(errOut, "want a subcommand") || out != "" {
			t.Errorf("oncectl %s: exit %d (want %d)\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, ExitUsage, out, errOut)
		}
	}
	code, out, errOut := oncectl(t, "raft")
	if code != ExitOK || !strings.Contains(out, "remove-peer") {
		t.Errorf("oncectl raft: exit %d, want its help and 0\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestOperatorTokenFileWithAControlCharacter: cluster view's
// --operator-token-file holding a control character (a token an HTTP
// header cannot carry) is exit 2 naming that flag, with nothing sent, not
// an error that blames --gates.
func TestOperatorTokenFileWithAControlCharacter(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	file := writeTemp(t, t.TempDir(), "operator-token", "op\x01token\n")
	code, out, errOut := oncectl(t, "--gates", srv.URL, "--timeout", "2s", "cluster", "view", "--operator-token-file", file)
	if code != ExitUsage || !strings.Contains(errOut, "--operator-token-file") || strings.Contains(errOut, "--gates") || hits.Load() != 0 {
		t.Fatalf("exit %d (want %d), %d requests\nstdout: %s\nstderr: %s", code, ExitUsage, hits.Load(), out, errOut)
	}
}
