package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/localcluster"
)

var oncectlBin = sync.OnceValues(func() (string, error) {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "oncectl")
	cmd := exec.Command("go", "build", "-tags", "hashicorpmetrics", "-o", bin, "./cmd/oncectl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

// oncectl runs the built binary with args and returns stdout and the exit code.
func oncectl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	stdout, _, code := oncectlStderr(t, args...)
	return stdout, code
}

// oncectlStderr is oncectl that returns what it wrote to stderr too.
func oncectlStderr(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	bin, err := oncectlBin()
	if err != nil {
		t.Fatalf("building oncectl: %v", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if stderr.Len() > 0 {
		t.Logf("oncectl %s: stderr: %s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), stderr.String(), code
}

// pointOncectlAt waits for c's leader and ready gates, points oncectl at them
// (ONCE_GATES, ONCE_MANAGERS, the cluster secret and the managers' operator
// secret: ONCE_CLUSTER_SECRET_FILE, ONCE_OPERATOR_SECRET_FILE) and returns
// the leader.
func pointOncectlAt(t *testing.T, c *localcluster.Cluster) *localcluster.Node {
	t.Helper()
	leader, err := c.WaitLeader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	var mgrs []string
	for _, m := range c.Managers {
		mgrs = append(mgrs, m.HTTPAddr)
	}
	t.Setenv("ONCE_GATES", "http://"+c.Gates[0].HTTPAddr)
	t.Setenv("ONCE_MANAGERS", strings.Join(mgrs, ","))
	// The cluster's credential (its generated secret, by default) and the
	// managers' operator secret.
	t.Setenv("ONCE_CLUSTER_SECRET_FILE", c.SecretFile())
	t.Setenv("ONCE_OPERATOR_SECRET_FILE", c.OperatorSecretFile())
	return leader
}

// waitMembersAlive waits until every manager's gossip view holds want
// members alive. oncectl cluster members asks whichever manager answers
// first, and a member joins through one seed: the other managers learn of
// it only as gossip spreads, after the cluster has a leader and ready gates.
func waitMembersAlive(t *testing.T, ctx context.Context, c *localcluster.Cluster, want int) {
	t.Helper()
	for _, m := range c.Managers {
		mc := c.ManagerClient(m, c.OperatorSecret())
		testutil.WaitFor(t, left(ctx), func() (bool, string) {
			got, err := mc.Members(ctx)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", m.Name, err)
			}
			alive := 0
			for _, x := range got.Members {
				if x.Status == "alive" {
					alive++
				}
			}
			return alive >= want, fmt.Sprintf("%s sees %d of %d members alive: %v", m.Name, alive, want, got.Members)
		})
		mc.Close()
	}
}

func oncectlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, code := oncectl(t, append([]string{"-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("oncectl %s: exit %d, stdout %s", strings.Join(args, " "), code, out)
	}
	var err error
	if m, ok := v.(proto.Message); ok {
		err = protojson.Unmarshal([]byte(out), m) // an Operator answer
	} else {
		err = json.Unmarshal([]byte(out), v)
	}
	if err != nil {
		t.Fatalf("oncectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// oncectl against real processes: a job submitted, listed, read, its key
// read; the managers' status, the pool's members, the Raft peers; leadership
// handed over; a killed manager removed from the Raft configuration.
func TestOncectl(t *testing.T) {
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		// Only remove-peer removes the killed manager in this test.
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_DEAD_SERVER_GRACE_SECONDS=3600")
	})
	leader := pointOncectlAt(t, c)

	// Jobs.
	const key = "host1.dc1:77:1:0123456789abcdef"
	var sub struct {
		Job      api.Job
		Key      string
		Replayed bool
	}
	oncectlJSON(t, &sub, "submit", "--type", "demo", "--payload", `{"n":1}`, "--key", key)
	if sub.Job.JobID == "" || sub.Key != key || sub.Replayed {
		t.Fatalf("submit: %+v", sub)
	}
	oncectlJSON(t, &sub, "submit", "--type", "demo", "--payload", `{"n":1}`, "--key", key)
	if !sub.Replayed {
		t.Fatalf("the same submission again was not a replay: %+v", sub)
	}
	var jobs []api.Job
	oncectlJSON(t, &jobs, "job", "list", "--type", "demo")
	if len(jobs) != 1 || jobs[0].JobID != sub.Job.JobID {
		t.Fatalf("job list: %+v", jobs)
	}
	var job api.Job
	oncectlJSON(t, &job, "job", "get", sub.Job.JobID)
	var payload bytes.Buffer
	_ = json.Compact(&payload, job.Payload) // -o json indents it
	if job.JobID != sub.Job.JobID || payload.String() != `{"n":1}` {
		t.Fatalf("job get: %+v", job)
	}
	var k api.KeyInfo
	oncectlJSON(t, &k, "key", "get", key)
	if k.State != "committed" || k.JobID == nil || *k.JobID != sub.Job.JobID {
		t.Fatalf("key get: %+v", k)
	}
	if _, code := oncectl(t, "job", "get", "no-such-job"); code != 1 {
		t.Errorf("job get of a missing job: exit %d, want 1", code)
	}

	// The datacenter.
	var status []struct {
		Addr   string      `json:"addr"`
		Status *rpc.Status `json:"status"`
	}
	oncectlJSON(t, &status, "cluster", "status")
	leaders := 0
	for _, s := range status {
		if s.Status != nil && s.Status.IsLeader {
			leaders++
		}
	}
	if len(status) != 3 || leaders != 1 {
		t.Fatalf("cluster status: %d managers, %d leaders", len(status), leaders)
	}
	// oncectl asks any manager: wait until every one sees the gate, which
	// joined through one seed.
	waitMembersAlive(t, t.Context(), c, 4)
	members := &rpcpb.MembersResponse{}
	oncectlJSON(t, members, "cluster", "members")
	roles := map[string]int{}
	for _, m := range members.Members {
		if m.Status == "alive" {
			roles[m.Role]++
		}
	}
	if roles["manager"] != 3 || roles["gate"] != 1 {
		t.Fatalf("cluster members: %v", members)
	}
	peers := func() (string, []string) {
		var p struct {
			Leader string `json:"leader"`
			Peers  []struct {
				ID string `json:"id"`
			} `json:"peers"`
		}
		oncectlJSON(t, &p, "raft", "peers")
		var ids []string
		for _, x := range p.Peers {
			ids = append(ids, x.ID)
		}
		slices.Sort(ids)
		return p.Leader, ids
	}
	if l, ids := peers(); l != leader.Name || len(ids) != 3 {
		t.Fatalf("raft peers: leader %q, peers %v", l, ids)
	}

	// Leadership handed over, to whoever is most up to date.
	res := &rpcpb.PeerResult{}
	oncectlJSON(t, res, "raft", "transfer-leader")
	if res.Leader == "" || res.Leader == leader.Name {
		t.Fatalf("transfer-leader: %v (leader was %s)", res, leader.Name)
	}
	newLeader, err := c.WaitLeader(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// A dead manager removed.
	var victim *localcluster.Node
	for _, m := range c.Managers {
		if m != newLeader {
			victim = m
			break
		}
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	// Until the pool has found it dead, the autopilot would add it back as a
	// live member: remove-peer is for managers that are gone. It is the
	// leader's view that counts, and oncectl cluster members may ask another
	// manager: wait until every running manager's view marks it.
	for _, m := range c.Managers {
		if m == victim {
			continue
		}
		mc := c.ManagerClient(m, c.OperatorSecret())
		testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
			got, err := mc.Members(t.Context())
			if err != nil {
				return false, fmt.Sprintf("%s: %v", m.Name, err)
			}
			for _, x := range got.Members {
				if x.Name == victim.Name || x.NodeId == victim.Name {
					return x.Status != "alive", fmt.Sprintf("the killed manager marked failed in %s's pool: %s", m.Name, x.Status)
				}
			}
			return true, ""
		})
		mc.Close()
	}
	oncectlJSON(t, &rpcpb.PeerResult{}, "raft", "remove-peer", victim.Name)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		_, ids := peers()
		return len(ids) == 2 && !slices.Contains(ids, victim.Name), "the killed manager gone from the Raft peers"
	})
	if _, code := oncectl(t, "raft", "remove-peer", victim.Name); code != 1 {
		t.Errorf("remove-peer of a server no longer there: exit %d, want 1", code)
	}
	if _, code := oncectl(t, "raft", "remove-peer"); code != 2 {
		t.Errorf("remove-peer without an ID: exit %d, want 2", code)
	}
}

// A snapshot archive saved with oncectl and restored brings the ledger back
// to the moment it was taken: a job admitted before is there, one admitted
// after is gone. A damaged archive is refused and changes nothing.
func TestOncectlSnapshotSaveRestore(t *testing.T) {
	pointOncectlAt(t, startCluster(t, 3, 1, nil))
	submit := func(key string) string {
		var sub struct{ Job api.Job }
		oncectlJSON(t, &sub, "submit", "--type", "demo", "--key", key)
		return sub.Job.JobID
	}
	before := submit("host1.dc1:88:1:0123456789abcdef")
	archive := filepath.Join(t.TempDir(), "ledger.snap")
	var saved struct {
		Bytes int64 `json:"bytes"`
	}
	oncectlJSON(t, &saved, "snapshot", "save", archive)
	if saved.Bytes <= 0 {
		t.Fatalf("snapshot save: %+v", saved)
	}
	after := submit("host1.dc1:88:2:0123456789abcdef")

	// A damaged archive: refused, nothing changes.
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.snap")
	if err := os.WriteFile(damaged, flipStateByte(t, b), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, code := oncectl(t, "snapshot", "restore", damaged); code != 1 {
		t.Fatalf("restore of a damaged archive: exit %d, want 1", code)
	}
	if _, code := oncectl(t, "job", "get", after); code != 0 {
		t.Fatal("a refused restore changed the ledger")
	}

	// A leader that loses its office while its followers install the state
	// (a loaded machine) says the restore is not confirmed, and the
	// operator checks the ledger rather than send the archive again: the
	// wait below is that check.
	if out, stderr, code := oncectlStderr(t, "snapshot", "restore", archive); code != 0 && !strings.Contains(stderr, "restore not confirmed") {
		t.Fatalf("restore: exit %d %s", code, out)
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		_, gone := oncectl(t, "job", "get", after)
		_, kept := oncectl(t, "job", "get", before)
		return gone == 1 && kept == 0, "the job admitted before the snapshot readable and the one after gone"
	})
}

// flipStateByte rewrites a snapshot archive with one byte of state.bin
// changed and everything else (SHA256SUMS included) as it was.
func flipStateByte(t *testing.T, archive []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(archive)), tar.NewWriter(&out)
	flipped := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "state.bin" && len(b) > 0 {
			b[len(b)/2] ^= 0xff
			flipped = true
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil || !flipped {
		t.Fatalf("no state.bin in the archive (%v)", err)
	}
	return out.Bytes()
}

// oncectl gossip keyring rotates the gossip key of every member of a real
// cluster (three managers and a gate) through one manager: install, use,
// remove, each listed as applied on every member; the cluster keeps
// gossiping and admitting jobs; a refused step (removing the primary key)
// exits 1 and names the members that refused.
func TestOncectlGossipKeyring(t *testing.T) {
	const oldKey, newKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		o.Env = append(o.Env, "MANAGER_GOSSIP_KEY="+oldKey, "GATE_GOSSIP_KEY="+oldKey)
	})
	pointOncectlAt(t, c)
	alive := func() (n int, m *rpcpb.MembersResponse) {
		m = &rpcpb.MembersResponse{}
		oncectlJSON(t, m, "cluster", "members")
		for _, x := range m.Members {
			if x.Status == "alive" {
				n++
			}
		}
		return n, m
	}
	// The gate may join the pool a moment after the managers have a leader,
	// and oncectl may ask any manager: count keys once all four members are
	// there in every manager's view.
	waitMembersAlive(t, ctxFor(t, 30*time.Second), c, 4)
	check := func(args []string, want map[string][2]int) {
		t.Helper()
		k := &rpcpb.KeyringResponse{}
		oncectlJSON(t, k, append([]string{"gossip", "keyring"}, args...)...)
		got := map[string][2]int{}
		for _, key := range k.Keys {
			got[key.Key] = [2]int{int(key.Installed), int(key.Primary)}
		}
		if k.Members != 4 || !k.Complete || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("oncectl gossip keyring %v: %d members, complete %v, keys (installed, primary) %v; want 4 members, %v",
				args, k.Members, k.Complete, got, want)
		}
	}
	check([]string{"list"}, map[string][2]int{oldKey: {4, 4}})
	check([]string{"install", newKey}, map[string][2]int{oldKey: {4, 4}, newKey: {4, 0}})
	check([]string{"use", newKey}, map[string][2]int{oldKey: {4, 0}, newKey: {4, 4}})
	if out, code := oncectl(t, "gossip", "keyring", "remove", newKey); code != 1 || !strings.Contains(out, "refused") {
		t.Fatalf("removing the primary key: exit %d, %s", code, out)
	}
	check([]string{"remove", oldKey}, map[string][2]int{newKey: {4, 4}})

	// The pool still gossips (every member alive) and the cluster admits.
	if n, m := alive(); n != 4 {
		t.Fatalf("after the rotation: %d of %d members alive: %v", n, len(m.Members), m.Members)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	a, err := post(t.Context(), hc, c.GateURLs()[0], "keyring-rotated-1", `{"type":"demo","payload":{}}`)
	if err != nil || a.status != http.StatusCreated {
		t.Fatalf("submit after the rotation: %d %s %v", a.status, a.body, err)
	}
	if out, code := oncectl(t, "gossip", "keyring", "install", "not-base64"); code != 1 || out != "" {
		t.Fatalf("a bad key: exit %d, stdout %q; want 1 and the manager's refusal on stderr", code, out)
	}
}
