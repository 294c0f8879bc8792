package membership

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/testutil"
)

// rawMeta is a memberlist delegate publishing whatever bytes it is given:
// a node that is not one of ours, or of an encoding this version does not
// read.
type rawMeta struct {
	mu   sync.Mutex
	meta []byte
}

func (r *rawMeta) set(b []byte) {
	r.mu.Lock()
	r.meta = b
	r.mu.Unlock()
}

func (r *rawMeta) NodeMeta(int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.meta
}
func (r *rawMeta) NotifyMsg([]byte)                       {}
func (r *rawMeta) GetBroadcasts(int, int) [][]byte        { return nil }
func (r *rawMeta) LocalState(bool) []byte                 { return nil }
func (r *rawMeta) MergeRemoteState(buf []byte, join bool) {}

// A node whose meta this version cannot read (an unknown format, a
// truncated one) is not listed and does not disturb the others: the pool
// logs it, keeps its members, and lists the node once its meta reads, and
// drops it again, without a panic, if the meta turns unreadable.
func TestUnreadableMetaIsIgnored(t *testing.T) {
	var logs testutil.Buffer
	a := startPool(t, "a", RoleManager, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	b := startPool(t, "b", RoleGate, func(c *Config) { c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))

	rm := &rawMeta{meta: []byte{9, 2, 0}} // format 9
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "x", "127.0.0.1", 0, 0
	mc.Label = "once-lan/dc1"
	mc.Delegate = rm
	mc.Logger = logging.StdLogger(testutil.Logger(t), "memberlist")
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	if _, err := ml.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		return strings.Contains(logs.String(), `msg="ignoring member with unreadable meta" component=membership peer=x`), "a to log x's unreadable meta:\n" + logs.String()
	})
	if ok, _ := lists(a, "x"); ok {
		t.Fatalf("a lists x: %+v", a.Members())
	}

	valid := Meta{Role: RoleManager, Datacenter: "dc1", NodeID: "id-x", RPCAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2", Version: 1}
	for i, step := range []struct {
		meta   func() []byte
		listed bool
	}{
		{func() []byte { b, _ := valid.Encode(); return b }, true},
		{func() []byte { b, _ := valid.Encode(); return b[:len(b)-3] }, false}, // truncated
		{func() []byte { b, _ := valid.Encode(); return b }, true},
	} {
		rm.set(step.meta())
		if err := ml.UpdateNode(waitTimeout); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, waitTimeout, func() (bool, string) {
			for _, p := range []*Pool{a, b} {
				n := len(p.Managers("dc1"))
				if step.listed != (n == 2) {
					return false, fmt.Sprintf("step %d: %s to list x as a manager: %v (managers %+v)", i, p.cfg.NodeName, step.listed, p.Managers("dc1"))
				}
			}
			return true, ""
		})
		testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))
	}
}
