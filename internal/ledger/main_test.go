package ledger

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testStore is the backend newFSM gives the tests: "disk" (the default, what
// managers run) or "memory", from ONCE_LEDGER_TEST_STORE.
var testStore = func() string {
	if s := os.Getenv("ONCE_LEDGER_TEST_STORE"); s != "" {
		return s
	}
	return "disk"
}()

// newFSM returns an empty FSM of the tests' backend; a disk-backed one lives
// in a directory of the test's and is closed when the test ends.
func newFSM(t testing.TB, opts Options) *FSM {
	t.Helper()
	switch testStore {
	case "memory":
		return New(opts)
	case "disk":
		return openFSM(t, t.TempDir(), opts)
	}
	t.Fatalf("ONCE_LEDGER_TEST_STORE=%q: want disk or memory", testStore)
	return nil
}

// diskPassOnly skips a test that opens disk stores of its own, whatever the
// backend, in the memory pass: the disk pass (make test runs both) runs it
// the same way.
func diskPassOnly(t *testing.T) {
	t.Helper()
	if testStore == "memory" {
		t.Skip("tests the disk store only; runs in the disk pass")
	}
}

// openFSM opens the disk-backed FSM in dir and closes it when the test ends.
func openFSM(t testing.TB, dir string, opts Options) *FSM {
	t.Helper()
	f, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}
