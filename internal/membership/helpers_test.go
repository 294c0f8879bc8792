package membership

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

const waitTimeout = 15 * time.Second

// never checks for the whole duration that cond stays false.
func never(t testing.TB, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if ok, what := cond(); ok {
			t.Fatalf("unexpected: %s", what)
		}
		<-tick.C
	}
}

type testNode struct {
	name string
	pool *Pool
}

// startPool starts a pool on 127.0.0.1 with an OS-chosen port and the test
// profile; edit adjusts the config. It is shut down in t.Cleanup.
func startPool(t testing.TB, name string, role Role, edit func(*Config)) *Pool {
	t.Helper()
	cfg := Config{
		NodeName: name,
		BindAddr: "127.0.0.1",
		Profile:  ProfileTest,
		Logger:   testutil.Logger(t),
		Meta: Meta{
			Role:       role,
			Datacenter: "dc1",
			NodeID:     "id-" + name,
			RPCAddr:    "127.0.0.1:1",
			Version:    1,
		},
	}
	if role == RoleManager {
		cfg.Meta.RaftAddr = "127.0.0.1:2"
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		cancel()
		if err := p.Shutdown(); err != nil {
			t.Errorf("shutdown %s: %v", name, err)
		}
	})
	return p
}

// downSeed is a seed address nothing answers at until a pool is started on
// port: a free port below the ephemeral range (testutil.FreePorts), which an
// outgoing connection of this or another process cannot take meanwhile.
func downSeed(t testing.TB) (seed string, port int) {
	t.Helper()
	ports, err := testutil.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), ports[0]
}

func memberState(p *Pool, name string) (State, bool) {
	for _, m := range p.Members() {
		if m.Name == name {
			return m.State, true
		}
	}
	return 0, false
}

// seesAlive is a waitFor condition: every pool lists every name alive.
func seesAlive(pools []*Pool, names ...string) func() (bool, string) {
	return func() (bool, string) {
		for _, p := range pools {
			for _, n := range names {
				if s, ok := memberState(p, n); !ok || s != StateAlive {
					return false, fmt.Sprintf("%s to see %s alive (state %v, known %v)", p.cfg.NodeName, n, s, ok)
				}
			}
		}
		return true, ""
	}
}
