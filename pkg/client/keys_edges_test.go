package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// TestKeysRefusesAStateFileCorruptedWhileInUse: a state file that another
// process shares, found corrupt (or naming another client id) when a new
// block is due, is refused with ErrKeysState and left as it is. Replacing
// it with the block after this process's own limit (as Next did) handed
// out sequences the other process had reserved, and was handing out.
func TestKeysRefusesAStateFileCorruptedWhileInUse(t *testing.T) {
	for _, tc := range []struct{ name, content string }{
		{"torn", `{"client_id":"c","rese`},
		{"empty", ``},
		{"another client id", `{"client_id":"d","reserved":6}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.json")
			k1, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: 3})
			if err != nil {
				t.Fatal(err)
			}
			k2, err := OpenKeys(path, KeysOptions{Block: 3}) // reserves 4-6
			if err != nil {
				t.Fatal(err)
			}
			draw := uniqueDraws(t)
			for range 3 {
				if err := draw("first", k1); err != nil {
					t.Fatal(err)
				}
			}
			if err := draw("second", k2); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			// k1's block is used up: it must not reserve 4-6 again.
			if err := draw("first", k1); !errors.Is(err, ErrKeysState) {
				t.Fatalf("Next past the block with a %s state file: %v, want ErrKeysState", tc.name, err)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.content {
				t.Fatalf("the %s state file was replaced by %q", tc.name, b)
			}
			// k2 still hands out what it reserved before.
			for range 2 {
				if err := draw("second", k2); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The child process of the tests below: the test binary run again with
// keysChildEnv set to "<mode> <state file> <block>". It prints "key <sequence>"
// for every key Next hands out, and "refused <errors.Is(err, ErrKeysState)>"
// for every Next that fails.
const keysChildEnv = "ONCE_CLIENT_TEST_KEYS_CHILD"

// keysChild runs the child when keysChildEnv is set, and exits.
func keysChild() bool {
	arg := os.Getenv(keysChildEnv)
	if arg == "" {
		return false
	}
	var mode, path string
	var block uint64
	if _, err := fmt.Sscan(arg, &mode, &path, &block); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if mode == "hold" { // see TestKeysLockHeldByAnotherProcess
		// Hold the state file's lock, print "held", and release it
		// when stdin closes.
		unlock, err := lockFile(context.Background(), path+lockSuffix)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin)
		unlock()
		os.Exit(0)
	}
	k, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: block})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	next := func() {
		raw, err := k.Next()
		if err != nil {
			fmt.Printf("refused %v\n", errors.Is(err, ErrKeysState))
			return
		}
		key, err := keysParse(raw)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("key %d\n", key)
	}
	switch mode {
	case "draw": // until killed
		for {
			next()
		}
	case "fullDisk": // see TestKeysOnAFullDisk
		for range block {
			next()
		}
		if err := keysLimitFileSize(8); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		next()
		next()
		if err := keysLimitFileSize(-1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		next()
	}
	os.Exit(0)
	return true
}

// keysChildCmd is the child of mode on path with block.
func keysChildCmd(t *testing.T, mode, path string, block uint64) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", keysChildEnv, mode, path, block))
	cmd.Stderr = os.Stderr
	// A test that fails before it kills and reaps the child leaves none
	// running (a reaped one is not signalled again).
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// TestKeysKill9NeverReuses: processes drawing keys as fast as they can
// from one state file are killed with SIGKILL after 1, 2, 3… keys (so at
// any point of a reservation: before its write, with the temporary file
// half written, between its rename and the directory's fsync, just after);
// every sequence any of them handed out is handed out once, and each
// process starts after everything the ones before it handed out. Guard:
// the code was right.
func TestKeysKill9NeverReuses(t *testing.T) {
	for _, block := range []uint64{1, 2, 5} {
		path := filepath.Join(t.TempDir(), "keys.json")
		seen := map[uint64]int{}
		var highest uint64
		for round := range 12 {
			cmd := keysChildCmd(t, "draw", path, block)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			var first uint64
			for n := 0; sc.Scan(); n++ {
				f := sc.Text()
				var seq uint64
				if _, err := fmt.Sscanf(f, "key %d", &seq); err != nil {
					t.Fatalf("block %d round %d: child printed %q", block, round, f)
				}
				if other, ok := seen[seq]; ok {
					t.Fatalf("block %d: sequence %d handed out in rounds %d and %d", block, seq, other, round)
				}
				seen[seq] = round
				if n == 0 {
					first = seq
				}
				if n == round {
					// Lines still in the pipe are keys handed out too:
					// read on until EOF.
					_ = cmd.Process.Signal(syscall.SIGKILL)
				}
			}
			if err := cmd.Wait(); err == nil {
				t.Fatalf("block %d round %d: the child exited by itself", block, round)
			}
			if first <= highest {
				t.Fatalf("block %d round %d: first sequence %d, not after %d", block, round, first, highest)
			}
			for s := range seen {
				highest = max(highest, s)
			}
		}
	}
}

// keysParse is the sequence of raw.
func keysParse(raw string) (uint64, error) {
	i := len(raw)
	for i > 0 && raw[i-1] != ':' {
		i--
	}
	j := i - 1
	for j > 0 && raw[j-1] != ':' {
		j--
	}
	if i <= 0 || j <= 0 {
		return 0, fmt.Errorf("key %q is not structured", raw)
	}
	return strconv.ParseUint(raw[j:i-1], 10, 64)
}

// TestKeysTwoProcessesAtOnce: two processes drawing keys from one state
// file at the same time (flock between them, each waiting for the other's
// reservation) never hand out the same sequence; both are then killed with
// SIGKILL, and a third starts after everything they handed out. Guard:
// the code was right.
func TestKeysTwoProcessesAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	type drawn struct {
		seqs []uint64
		err  error
	}
	results := make(chan drawn, 2)
	var cmds []*exec.Cmd
	for range 2 {
		cmd := keysChildCmd(t, "draw", path, 3)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		go func() {
			var d drawn
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var seq uint64
				if _, err := fmt.Sscanf(sc.Text(), "key %d", &seq); err != nil {
					d.err = fmt.Errorf("child printed %q", sc.Text())
					break
				}
				d.seqs = append(d.seqs, seq)
				if len(d.seqs) == 200 {
					// Enough drawn by this one while the other ran:
					// kill it, and read what it printed before.
					_ = cmd.Process.Signal(syscall.SIGKILL)
				}
			}
			results <- d
		}()
	}
	seen := map[uint64]int{}
	var highest uint64
	for range 2 {
		d := <-results
		if d.err != nil {
			t.Fatal(d.err)
		}
		if len(d.seqs) < 200 {
			t.Fatalf("a child drew %d keys", len(d.seqs))
		}
		for _, s := range d.seqs {
			seen[s]++
			highest = max(highest, s)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err == nil {
			t.Fatalf("child %d exited by itself", i)
		}
	}
	for s, n := range seen {
		if n > 1 {
			t.Fatalf("sequence %d handed out by both processes", s)
		}
	}
	k, err := OpenKeys(path, KeysOptions{Block: 3})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := k.Next()
	if err != nil {
		t.Fatal(err)
	}
	if s := seqOf(t, raw).Sequence; s <= highest {
		t.Fatalf("the next process drew %d, not after %d", s, highest)
	}
}

// TestKeysLockHeldByAnotherProcess: while another process holds the state
// file's lock (and does not let go), OpenKeys, Next and Submit wait for it
// only as long as LockTimeout or their context allows, then fail with a
// *KeysLockedError naming that process; once it lets go, the file opens.
// OpenKeys waited for the lock forever.
func TestKeysLockHeldByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	k, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Next(); err != nil { // its block is used up
		t.Fatal(err)
	}
	cmd := keysChildCmd(t, "hold", path, 0)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("child printed %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	held := func(name string, err error, want error) {
		t.Helper()
		var locked *KeysLockedError
		if !errors.As(err, &locked) || locked.PID != pid || locked.Path != path+lockSuffix ||
			!errors.Is(err, ErrKeysState) || !errors.Is(err, want) {
			t.Fatalf("%s while process %d holds the lock: %v, want a *KeysLockedError naming it and matching %v", name, pid, err, want)
		}
	}
	_, err = OpenKeys(path, KeysOptions{LockTimeout: 50 * time.Millisecond})
	held("OpenKeys", err, context.DeadlineExceeded)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = OpenKeysContext(ctx, path, KeysOptions{})
	held("OpenKeysContext", err, context.Canceled)
	k.wait = 50 * time.Millisecond
	_, err = k.Next()
	held("Next", err, context.DeadlineExceeded)
	// Submit's wait ends with its context, before LockTimeout.
	k.wait = DefaultLockTimeout
	c, err := New([]string{"127.0.0.1:1"}, Options{Keys: k})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Submit(ctx, api.JobRequest{Type: "t"})
	held("Submit", err, context.DeadlineExceeded)

	// A Submit behind another goroutine's Next, which waits for the lock
	// as long as LockTimeout allows, gives up when its context ends too.
	k.wait = time.Hour
	waiting := make(chan error, 1)
	go func() {
		_, err := k.Next()
		waiting <- err
	}()
	waitFor(t, func() bool { return len(k.mu) == 1 }) // that Next holds k
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Submit(ctx, api.JobRequest{Type: "t"})
	var locked *KeysLockedError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrKeysState) || errors.As(err, &locked) {
		t.Fatalf("Submit behind a Next waiting for the lock: %v, want ErrKeysState and context.DeadlineExceeded from its wait behind that Next, not the lock's", err)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("Next waiting for the lock once it is free: %v", err)
	}
	if _, err := k.Next(); err != nil {
		t.Fatalf("Next once the lock is free: %v", err)
	}
	if _, err := OpenKeys(path, KeysOptions{}); err != nil {
		t.Fatalf("OpenKeys once the lock is free: %v", err)
	}
}

// TestKeysStateFileLostWhileInUse: a state file deleted (its directory
// too), or put back as an older copy or one rolled back, while two
// processes share it, fails Next with ErrKeysStateLost from then on and
// is not recreated. Next recreated it from its own limit, handing out
// sequences the other process had reserved, and was handing out.
func TestKeysStateFileLostWhileInUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, path string, before []byte)
	}{
		{"deleted", func(t *testing.T, path string, _ []byte) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory deleted", func(t *testing.T, path string, _ []byte) {
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
		{"older copy put back", func(t *testing.T, path string, before []byte) {
			if err := os.WriteFile(path+".copy", before, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".copy", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"rolled back", func(t *testing.T, path string, _ []byte) {
			if err := os.WriteFile(path, []byte(`{"client_id":"c","reserved":1}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state", "keys.json")
			if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			k1, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: 3}) // 1-3
			if err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			k2, err := OpenKeys(path, KeysOptions{Block: 3}) // 4-6
			if err != nil {
				t.Fatal(err)
			}
			draw := uniqueDraws(t)
			for range 3 {
				if err := draw("first", k1); err != nil {
					t.Fatal(err)
				}
			}
			tc.lose(t, path, before)
			after, _ := os.ReadFile(path)
			for range 2 { // and again: it is for good
				if err := draw("first", k1); !errors.Is(err, ErrKeysStateLost) || !errors.Is(err, ErrKeysState) {
					t.Fatalf("Next past the block with the state file %s: %v, want ErrKeysStateLost", tc.name, err)
				}
			}
			if b, _ := os.ReadFile(path); string(b) != string(after) {
				t.Fatalf("the state file %s became %q", tc.name, b)
			}
			// k2 still hands out what it reserved before.
			for range 3 {
				if err := draw("second", k2); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// uniqueDraws returns a draw of the next key of k, by the holder name,
// that fails t if its sequence was drawn before by any holder.
func uniqueDraws(t *testing.T) func(name string, k *Keys) error {
	seen := map[uint64]string{}
	return func(name string, k *Keys) error {
		raw, err := k.Next()
		if err != nil {
			return err
		}
		s := seqOf(t, raw).Sequence
		if other, ok := seen[s]; ok {
			t.Fatalf("sequence %d handed out by %s and %s", s, other, name)
		}
		seen[s] = name
		return nil
	}
}
