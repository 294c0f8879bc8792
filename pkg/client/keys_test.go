package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/once-dev/once/pkg/keys"
)

func seqOf(t *testing.T, raw string) keys.Key {
	t.Helper()
	k, err := keys.Parse(raw)
	if err != nil || !k.Structured {
		t.Fatalf("key %q: %+v %v", raw, k, err)
	}
	return k
}

func TestKeysPersistAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	k1, err := OpenKeys(path, KeysOptions{Block: 3})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 5; i++ { // crosses a block boundary
		raw, err := k1.Next()
		if err != nil {
			t.Fatal(err)
		}
		key := seqOf(t, raw)
		if key.Sequence != last+1 || key.ClientID != k1.ClientID() || key.Nonce != k1.Nonce() {
			t.Fatalf("key %d: %+v", i, key)
		}
		last = key.Sequence
	}
	// A restart: same client id (the option is ignored once the file exists),
	// a new nonce, sequences after everything the first process reserved.
	k2, err := OpenKeys(path, KeysOptions{ClientID: "other", Block: 3})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := k2.Next()
	if err != nil {
		t.Fatal(err)
	}
	key := seqOf(t, raw)
	if key.ClientID != k1.ClientID() || key.Nonce == k1.Nonce() || key.Sequence <= last {
		t.Fatalf("after restart %+v (first process: client %q nonce %q last %d)", key, k1.ClientID(), k1.Nonce(), last)
	}
}

func TestKeysCrashAfterReserveNeverReuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	k1, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: 10})
	if err != nil {
		t.Fatal(err)
	}
	// The process reserves 1-10 and "crashes" (is dropped) having used none.
	// Reopening many times without using anything never goes back.
	_ = k1
	seen := map[uint64]bool{}
	for i := 0; i < 5; i++ {
		k, err := OpenKeys(path, KeysOptions{Block: 10})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := k.Next()
		if err != nil {
			t.Fatal(err)
		}
		s := seqOf(t, raw).Sequence
		if s <= 10 || seen[s] {
			t.Fatalf("reopen %d handed out sequence %d (seen %v)", i, s, seen)
		}
		seen[s] = true
	}
	// No temporary files are left behind: the state file, and the lock
	// file beside it (which stays, as locks are taken on it).
	ents, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"keys.json"}; len(names) != 2 || names[0] != want[0] || names[1] != "keys.json.lock" {
		t.Fatalf("directory holds %v", names)
	}
}

func TestKeysConcurrentUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	k, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: 7})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 50
	out := make(chan string, goroutines*each)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				raw, err := k.Next()
				if err != nil {
					t.Error(err)
					return
				}
				out <- raw
			}
		}()
	}
	wg.Wait()
	close(out)
	seen := map[string]bool{}
	for raw := range out {
		if seen[raw] {
			t.Fatalf("key %q handed out twice", raw)
		}
		seen[raw] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d keys, want %d", len(seen), goroutines*each)
	}
}

func TestKeysBadState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeys(path, KeysOptions{}); err == nil {
		t.Fatal("OpenKeys accepted a corrupt state file")
	}
	if _, err := OpenKeys(filepath.Join(t.TempDir(), "k"), KeysOptions{ClientID: "bad id"}); !errorsIsInvalid(err) {
		t.Fatalf("bad client id: %v", err)
	}
}

func errorsIsInvalid(err error) bool {
	return errors.Is(err, keys.ErrInvalid) && errors.Is(err, ErrKeysState)
}

// TestKeysNeverWrapAround: a state file whose reserved sequence is near the
// largest uint64 (or a block that large) makes OpenKeys or Next fail with
// ErrKeysState, never hand out sequences that wrapped around to 0, 1, 2…
// (used already) nor write a smaller reserved sequence to the file.
func TestKeysNeverWrapAround(t *testing.T) {
	const max = ^uint64(0)
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"client_id":"c","reserved":18446744073709551615}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := OpenKeys(path, KeysOptions{}); !errors.Is(err, ErrKeysState) {
		var raw string
		if err == nil {
			raw, err = k.Next()
		}
		t.Fatalf("reserved %d: OpenKeys gave %q, %v; want ErrKeysState", max, raw, err)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"client_id":"c","reserved":18446744073709551615}`+"\n" {
		t.Fatalf("the state file changed: %s", b)
	}

	// The last block that fits is handed out up to the largest sequence,
	// then Next fails.
	if err := os.WriteFile(path, []byte(`{"client_id":"c","reserved":18446744073709551612}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := OpenKeys(path, KeysOptions{Block: 3})
	if err != nil {
		t.Fatal(err)
	}
	for want := max - 2; ; want++ {
		raw, err := k.Next()
		if err != nil {
			t.Fatal(err)
		}
		if got := seqOf(t, raw).Sequence; got != want {
			t.Fatalf("sequence %d, want %d", got, want)
		}
		if want == max {
			break
		}
	}
	if raw, err := k.Next(); !errors.Is(err, ErrKeysState) {
		t.Fatalf("past the largest sequence: %q, %v", raw, err)
	}

	// A block too large to add to what the file reserved.
	path2 := filepath.Join(t.TempDir(), "keys.json")
	k2, err := OpenKeys(path2, KeysOptions{ClientID: "c", Block: max})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 3 {
		raw, err := k2.Next()
		if err != nil {
			t.Fatal(err)
		}
		if s := seqOf(t, raw).Sequence; s <= last {
			t.Fatalf("sequence %d after %d", s, last)
		} else {
			last = s
		}
	}
	if _, err := OpenKeys(path2, KeysOptions{Block: 1}); !errors.Is(err, ErrKeysState) {
		t.Fatalf("a file reserving every sequence reopened: %v", err)
	}
}

// TestKeysSharedByTwoProcesses: two Keys of one state file (two processes
// of one client id; flock excludes two open files of one process as it
// does two processes) never hand out the same sequence, however their
// blocks interleave, and many opening it at once leave it whole.
func TestKeysSharedByTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	k1, err := OpenKeys(path, KeysOptions{ClientID: "c", Block: 3})
	if err != nil {
		t.Fatal(err)
	}
	k2, err := OpenKeys(path, KeysOptions{Block: 3})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]string{}
	draw := func(name string, k *Keys) {
		t.Helper()
		raw, err := k.Next()
		if err != nil {
			t.Fatal(err)
		}
		s := seqOf(t, raw).Sequence
		if other, ok := seen[s]; ok {
			t.Fatalf("sequence %d handed out by %s and %s", s, other, name)
		}
		seen[s] = name
	}
	for range 10 {
		draw("first", k1)
		draw("first", k1)
		draw("second", k2)
	}

	// Processes opening the file at once (the default keys file of
	// oncectl commands run in parallel), each drawing past a block.
	const procs, each = 8, 5
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := OpenKeys(path, KeysOptions{Block: 3})
			if err != nil {
				errs <- err
				return
			}
			for range each {
				raw, err := k.Next()
				if err != nil {
					errs <- err
					return
				}
				key, err := keys.Parse(raw)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if other, ok := seen[key.Sequence]; ok {
					mu.Unlock()
					errs <- fmt.Errorf("sequence %d handed out twice (also by %s)", key.Sequence, other)
					return
				}
				seen[key.Sequence] = "a parallel one"
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := OpenKeys(path, KeysOptions{}); err != nil {
		t.Fatalf("the state file after parallel use: %v", err)
	}
}
