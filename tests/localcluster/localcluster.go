// Package localcluster runs a once cluster as real processes on loopback: three
// (or N) managers and two (or M) gates, each with its own log file and data
// directory under one base directory. It is what `make run` starts, and what the
// end-to-end, chaos and benchmark harnesses drive: it can kill -9 a process,
// pause and resume it (SIGSTOP/SIGCONT), restart it on the same data directory,
// and, with Options.Failpoints (managers and gates run as the tests module's
// oncemanager-faults and oncegate-faults), cut a manager off from the others,
// shift a manager's clock and move leadership, through the managers'
// /debug/failpoints.
//
// NewFederation lays out several such datacenters whose managers join one WAN
// gossip pool (`make run-multidc`, the multi-datacenter e2e test).
//
// Processes are tracked by PID, never found by name, and every one is stopped by
// Stop (or by the test's Cleanup).
package localcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/faultnet"
)

// Role of a process.
type Role string

// Roles.
const (
	RoleManager Role = "manager"
	RoleGate    Role = "gate"
)

// Options configures a cluster. Zero values take the defaults noted.
type Options struct {
	// BinDir holds the gate and manager binaries (see Build).
	BinDir string
	// BaseDir receives logs/<node>.log and data/<node>/. Required.
	BaseDir string
	// Managers and Gates count the processes (at least one manager; zero gates
	// is a manager-only cluster).
	Managers, Gates int
	// GatePorts fixes the gates' HTTP ports (e.g. 8080, 8081); empty picks free ports.
	GatePorts []int
	// Datacenter name (default dc1).
	Datacenter string
	// Env is added to every process's environment (e.g. IDEMPOTENCY_* settings).
	Env []string
	// ManagerEnv and GateEnv are added to one role's environment.
	ManagerEnv, GateEnv []string
	// Failpoints runs the managers as FaultManagerBinary (the real manager
	// with /debug/failpoints: partitions, clock skew, leadership transfer)
	// and the gates as FaultGateBinary instead of the product's binaries;
	// every process then follows the federation's WAN cut (CutWAN).
	Failpoints bool
	// Fast shortens Raft and membership timings for tests.
	Fast bool
	// ClusterSecret, when set, is written to <BaseDir>/cluster-secret and
	// given to every process (MANAGER_CLUSTER_SECRET_FILE,
	// GATE_CLUSTER_SECRET_FILE): without TLS files the managers serve RPC
	// and Raft over mutual TLS with the CA derived from it. Empty (and no
	// TLS, not Insecure): a random secret is generated (security.go).
	ClusterSecret string
	// Insecure runs the processes without a credential (MANAGER_INSECURE,
	// GATE_INSECURE): plain RPC, Raft and gossip, the Operator service open
	// to anyone; no operator secret.
	Insecure bool
	// OperatorSecret is the managers' operator secret (written to
	// <BaseDir>/operator-secret, MANAGER_OPERATOR_SECRET_FILE); empty: the
	// file's secret when there is one, else a fresh random one. oncectl
	// takes OperatorSecretFile; ManagerClient presents it when asked. None
	// with Insecure.
	OperatorSecret string
	// TLS, when set, runs the cluster with TLS everywhere (docs/security.md):
	// the gates serve HTTPS, managers serve RPC and Raft over mutual TLS, the
	// gates and the harness's own probes present client certificates.
	TLS *TLSFiles
	// GateToken, when set, is the bearer token the harness's own reads of
	// the gates' API present (gates with GATE_TOKEN_FILE: WaitFederated).
	GateToken string
	// Stdout, when set, also receives every process's output (make run).
	Stdout io.Writer
	// WAN gives every manager a WAN gossip address (MANAGER_WAN_GOSSIP_ADDR)
	// and joins the federation's WAN pool through WANJoin and this
	// datacenter's first manager (see NewFederation).
	WAN     bool
	WANJoin []string
}

// Node is one process of the cluster.
type Node struct {
	Name     string
	Role     Role
	HTTPAddr string // gate: public API; manager: RPC listener
	RaftAddr string // manager only
	Gossip   string // memberlist bind address
	// WANGossip is a manager's WAN memberlist bind address (Options.WAN).
	WANGossip string
	DataDir   string
	LogPath   string

	c   *Cluster
	env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
	log  *os.File
}

// Cluster is a set of running processes.
type Cluster struct {
	opts     Options
	Managers []*Node
	Gates    []*Node
	client   *http.Client
	// noSecret is client without the cluster secret (TLS all the same).
	noSecret *http.Client
	// rpcTLS is the harness's TLS configuration towards the managers (nil:
	// insecure).
	rpcTLS *tls.Config
}

// FaultManagerBinary is the fault-injection manager of the tests module
// (tests/cmd/oncemanager-faults), run for managers when Options.Failpoints is set.
const FaultManagerBinary = "oncemanager-faults"

// FaultGateBinary is the fault-injection gate of the tests module
// (tests/cmd/oncegate-faults), run for gates when Options.Failpoints is set:
// its connections to other datacenters follow the federation's WAN cut.
const FaultGateBinary = "oncegate-faults"

// Build compiles cmd/gate and cmd/manager of the product module (found by
// ModuleRoot), and the tests module's FaultManagerBinary and FaultGateBinary,
// into binDir: what the e2e tests, the chaos runner and oncebench -build run.
// race adds -race (slower binaries that catch data races).
func Build(ctx context.Context, binDir string, race bool) error {
	moduleDir, err := ModuleRoot()
	if err != nil {
		return err
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return err
	}
	for _, b := range []struct{ dir, pkgs []string }{
		{[]string{moduleDir}, []string{"./cmd/gate", "./cmd/manager"}},
		{[]string{moduleDir, "tests"}, []string{"./cmd/" + FaultManagerBinary, "./cmd/" + FaultGateBinary}},
	} {
		args := []string{"build", "-tags", "hashicorpmetrics", "-o", binDir + string(os.PathSeparator)}
		if race {
			args = append(args, "-race")
		}
		args = append(args, b.pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(b.dir...)
		if !race {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build %s: %w\n%s", strings.Join(b.pkgs, " "), err, out)
		}
	}
	return nil
}

// productModule is the module path of the product (the parent of this tests
// module).
const productModule = "github.com/once-dev/once"

// ModuleRoot finds the product module's root: the directory, from the working
// directory up, whose go.mod declares github.com/once-dev/once (the tests
// module's own go.mod, in tests/, is passed over).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modfile.ModulePath(b) == productModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localcluster: the go.mod of " + productModule + " is not found above the working directory")
		}
		dir = parent
	}
}

// New lays out a cluster (names, ports, directories) without starting it.
func New(opts Options) (*Cluster, error) {
	if opts.BaseDir == "" {
		return nil, errors.New("localcluster: BaseDir is required")
	}
	if opts.Managers < 1 || opts.Gates < 0 {
		return nil, fmt.Errorf("localcluster: need at least one manager and no negative gates (got %d, %d)", opts.Managers, opts.Gates)
	}
	if opts.Datacenter == "" {
		opts.Datacenter = "dc1"
	}
	// A cluster restarted from its directory gets the ports it had: the
	// managers' Raft configuration names every voter by address, and a group
	// whose members all moved cannot elect a leader.
	ports, err := loadPorts(opts.BaseDir)
	if err != nil {
		return nil, err
	}
	need := opts.Managers*3 + opts.Gates*2
	if opts.WAN {
		need += opts.Managers
	}
	if len(ports) != need {
		if ports, err = testutil.FreePorts(need); err != nil {
			return nil, err
		}
		if err := savePorts(opts.BaseDir, ports); err != nil {
			return nil, err
		}
	}
	next := func() int { p := ports[0]; ports = ports[1:]; return p }
	gossipKey, err := ensureCredential(&opts, opts.BaseDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.BaseDir, 0o755); err != nil {
		return nil, err
	}
	if !opts.Insecure {
		if opts.OperatorSecret, err = writeOperatorSecret(opts.BaseDir, opts.OperatorSecret); err != nil {
			return nil, err
		}
		opts.ManagerEnv = append([]string{"MANAGER_OPERATOR_SECRET_FILE=" + operatorSecretPath(opts.BaseDir)}, opts.ManagerEnv...)
	}
	transport, err := harnessTransport(opts)
	if err != nil {
		return nil, err
	}
	member := withSecret(transport, opts.ClusterSecret)
	// The harness's client sends the managers' credentials to the managers
	// only: a gate gets the tenant's bearer token its caller set.
	gates := map[string]bool{}
	harness := byHost{gates: gates, gate: transport, other: member}
	c := &Cluster{opts: opts, client: &http.Client{Timeout: 2 * time.Second, Transport: harness},
		noSecret: &http.Client{Timeout: 2 * time.Second, Transport: transport}, rpcTLS: transport.TLSClientConfig}
	if f := opts.TLS; f != nil {
		c.opts.ManagerEnv = append([]string{"MANAGER_TLS_CA_FILE=" + f.CA, "MANAGER_TLS_CERT_FILE=" + f.ManagerCert,
			"MANAGER_TLS_KEY_FILE=" + f.ManagerKey}, c.opts.ManagerEnv...)
		c.opts.GateEnv = append([]string{"GATE_RPC_TLS_CA_FILE=" + f.CA, "GATE_RPC_TLS_CERT_FILE=" + f.GateClientCert,
			"GATE_RPC_TLS_KEY_FILE=" + f.GateClientKey, "GATE_TLS_CERT_FILE=" + f.GateCert, "GATE_TLS_KEY_FILE=" + f.GateKey},
			c.opts.GateEnv...)
		opts = c.opts
	}
	for _, d := range []string{"logs", "data"} {
		if err := os.MkdirAll(filepath.Join(opts.BaseDir, d), 0o755); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.Insecure:
		c.opts.ManagerEnv = append([]string{"MANAGER_INSECURE=true"}, c.opts.ManagerEnv...)
		c.opts.GateEnv = append([]string{"GATE_INSECURE=true"}, c.opts.GateEnv...)
		opts = c.opts
	case gossipKey != "":
		c.opts.ManagerEnv = append([]string{"MANAGER_GOSSIP_KEY=" + gossipKey}, c.opts.ManagerEnv...)
		if opts.WAN {
			c.opts.ManagerEnv = append([]string{"MANAGER_WAN_GOSSIP_KEY=" + gossipKey}, c.opts.ManagerEnv...)
		}
		c.opts.GateEnv = append([]string{"GATE_GOSSIP_KEY=" + gossipKey}, c.opts.GateEnv...)
		opts = c.opts
	}
	if opts.ClusterSecret != "" {
		path := filepath.Join(opts.BaseDir, secretFile)
		if err := os.WriteFile(path, []byte(opts.ClusterSecret+"\n"), 0o600); err != nil {
			return nil, err
		}
		c.opts.ManagerEnv = append([]string{"MANAGER_CLUSTER_SECRET_FILE=" + path}, c.opts.ManagerEnv...)
		c.opts.GateEnv = append([]string{"GATE_CLUSTER_SECRET_FILE=" + path}, c.opts.GateEnv...)
		opts = c.opts
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	var seeds []string
	var rpcAddrs []string
	for i := 1; i <= opts.Managers; i++ {
		n := &Node{Name: fmt.Sprintf("manager%d", i), Role: RoleManager, c: c,
			HTTPAddr: addr(next()), RaftAddr: addr(next()), Gossip: addr(next())}
		c.Managers = append(c.Managers, n)
		seeds = append(seeds, n.Gossip)
		rpcAddrs = append(rpcAddrs, n.HTTPAddr)
	}
	for i := 1; i <= opts.Gates; i++ {
		port := 0
		if i-1 < len(opts.GatePorts) {
			port = opts.GatePorts[i-1]
		} else {
			port = next()
		}
		n := &Node{Name: fmt.Sprintf("gate%d", i), Role: RoleGate, c: c, HTTPAddr: addr(port), Gossip: addr(next())}
		c.Gates = append(c.Gates, n)
		gates[n.HTTPAddr] = true
	}
	if opts.WAN { // after every other port, so a single datacenter's layout is unchanged
		for _, n := range c.Managers {
			n.WANGossip = addr(next())
		}
	}
	for i, n := range c.Managers {
		n.DataDir = filepath.Join(opts.BaseDir, "data", n.Name)
		n.LogPath = filepath.Join(opts.BaseDir, "logs", n.Name+".log")
		// Each manager is given one seed: the first manager (the first manager
		// is given the second), as an operator would.
		seed := seeds[0]
		if i == 0 && len(seeds) > 1 {
			seed = seeds[1]
		}
		n.env = c.managerEnv(n, seed, opts.Managers)
	}
	for _, n := range c.Gates {
		n.LogPath = filepath.Join(opts.BaseDir, "logs", n.Name+".log")
		n.env = append([]string{
			"GATE_NODE_NAME=" + n.Name,
			"GATE_DATACENTER=" + opts.Datacenter,
			"GATE_LISTEN_ADDR=" + n.HTTPAddr,
			"GATE_MANAGERS=" + strings.Join(rpcAddrs, ","),
			"GATE_GOSSIP_ADDR=" + n.Gossip,
			"GATE_JOIN=" + seeds[0],
		}, opts.GateEnv...)
		if opts.Fast {
			n.env = append(n.env, "GATE_GOSSIP_PROFILE=local")
		}
	}
	return c, nil
}

// AddManager lays out one more manager of the cluster's datacenter: the next
// name (manager4 after three), new ports, its own data directory and log, one
// seed (the first manager's gossip address) and the cluster's
// MANAGER_BOOTSTRAP_EXPECT, as an operator adds a manager to a running
// datacenter. env is added to its environment after everything else, so it
// overrides (a different MANAGER_GOSSIP_KEY, say). It starts nothing: call the
// node's Start. Cluster.Stop stops it with the others.
//
// AddManager must not run concurrently with other Cluster methods.
func (c *Cluster) AddManager(env ...string) (*Node, error) {
	ports, err := c.freshPorts(3)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	n := &Node{Name: fmt.Sprintf("manager%d", len(c.Managers)+1), Role: RoleManager, c: c,
		HTTPAddr: addr(ports[0]), RaftAddr: addr(ports[1]), Gossip: addr(ports[2])}
	n.DataDir = filepath.Join(c.opts.BaseDir, "data", n.Name)
	n.LogPath = filepath.Join(c.opts.BaseDir, "logs", n.Name+".log")
	n.env = c.managerEnv(n, c.Managers[0].Gossip, c.opts.Managers)
	n.env = append(n.env, env...)
	c.Managers = append(c.Managers, n)
	return n, nil
}

// freshPorts returns n free ports that no node of the cluster was given (a
// stopped node's port may be free now, but it is still that node's).
func (c *Cluster) freshPorts(n int) ([]int, error) {
	used := map[int]bool{}
	for _, node := range c.All() {
		for _, a := range []string{node.HTTPAddr, node.RaftAddr, node.Gossip} {
			if a == "" {
				continue
			}
			if _, ps, err := net.SplitHostPort(a); err == nil {
				if p, err := strconv.Atoi(ps); err == nil {
					used[p] = true
				}
			}
		}
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 10 {
			return nil, errors.New("localcluster: no fresh free ports")
		}
		ports, err := testutil.FreePorts(n + len(used))
		if err != nil {
			return nil, err
		}
		for _, p := range ports {
			if !used[p] && len(out) < n {
				used[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// managerEnv is a manager's environment: its identity, addresses, one seed and
// bootstrap_expect, then Options.ManagerEnv and the switches.
func (c *Cluster) managerEnv(n *Node, seed string, expect int) []string {
	env := append([]string{
		"MANAGER_NODE_ID=" + n.Name,
		"MANAGER_DATACENTER=" + c.opts.Datacenter,
		"MANAGER_DATA_DIR=" + n.DataDir,
		"MANAGER_RPC_ADDR=" + n.HTTPAddr,
		"MANAGER_RAFT_ADDR=" + n.RaftAddr,
		"MANAGER_GOSSIP_ADDR=" + n.Gossip,
		"MANAGER_JOIN=" + seed,
		"MANAGER_BOOTSTRAP_EXPECT=" + strconv.Itoa(expect),
	}, c.opts.ManagerEnv...)
	if n.WANGossip != "" {
		wanSeeds := append([]string(nil), c.opts.WANJoin...)
		if first := c.Managers[0]; first != n {
			wanSeeds = append(wanSeeds, first.WANGossip)
		} else if len(c.Managers) > 1 && c.Managers[1].WANGossip != "" {
			wanSeeds = append(wanSeeds, c.Managers[1].WANGossip)
		}
		env = append(env, "MANAGER_WAN_GOSSIP_ADDR="+n.WANGossip)
		if len(wanSeeds) > 0 {
			env = append(env, "MANAGER_WAN_JOIN="+strings.Join(wanSeeds, ","))
		}
	}
	if c.opts.Fast {
		// The lease as long as raft allows (at most the heartbeat timeout):
		// a shorter one lapses on a loaded machine (two cores under -race)
		// and the leader steps down with its followers healthy.
		env = append(env, "MANAGER_RAFT_HEARTBEAT_TIMEOUT=500ms", "MANAGER_RAFT_ELECTION_TIMEOUT=500ms",
			"MANAGER_RAFT_LEADER_LEASE_TIMEOUT=500ms", "MANAGER_GOSSIP_PROFILE=local")
	}
	return env
}

// SetEnv adds variables to the node's environment from its next Start on;
// they override what the node was given before (e.g. to restart a manager
// with MANAGER_LEAVE_ON_TERMINATE or another gossip key).
func (n *Node) SetEnv(env ...string) {
	n.mu.Lock()
	n.env = append(n.env, env...)
	n.mu.Unlock()
}

// Start starts every process.
func (c *Cluster) Start() error {
	for _, n := range c.All() {
		if err := n.Start(); err != nil {
			c.Stop()
			return err
		}
	}
	return nil
}

// StartReady starts every process and waits, within ctx, until a leader is
// elected and every gate is ready; on failure it stops every process and the
// error names the log directory. It is how make run, the chaos runner and
// oncebench start a cluster.
func (c *Cluster) StartReady(ctx context.Context) error {
	if err := c.Start(); err != nil {
		return err
	}
	_, err := c.WaitLeader(ctx)
	if err == nil {
		err = c.WaitReady(ctx)
	}
	if err != nil {
		c.Stop()
		return fmt.Errorf("localcluster: not ready (logs in %s): %w", filepath.Join(c.opts.BaseDir, "logs"), err)
	}
	return nil
}

// All returns managers then gates.
func (c *Cluster) All() []*Node {
	return append(append([]*Node(nil), c.Managers...), c.Gates...)
}

// TLSFiles are the PEM files of a cluster with TLS. The managers' certificate
// must name manager.once and 127.0.0.1 (server and client use), the gates'
// HTTPS certificate 127.0.0.1; the gates' and the harness's client
// certificates are for client use. One CA signs them all.
type TLSFiles struct {
	CA                                  string
	ManagerCert, ManagerKey             string
	GateCert, GateKey                   string // the gates' HTTPS
	GateClientCert, GateClientKey       string // the gates' RPC client certificate
	HarnessClientCert, HarnessClientKey string // the harness's probes of the managers
}

// GateURLs returns the gates' base URLs.
func (c *Cluster) GateURLs() []string {
	var out []string
	for _, g := range c.Gates {
		out = append(out, c.gateScheme()+"://"+g.HTTPAddr)
	}
	return out
}

// harnessTransport is the transport of the harness's own probes, without
// the cluster secret (a member of the cluster adds it): with TLS, it trusts
// the cluster CA and presents the harness's client certificate; with the
// secret alone, the CA derived from it and a leaf it signed.
func harnessTransport(opts Options) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if f := opts.TLS; f != nil {
		ca, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("localcluster: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("localcluster: TLS CA %s holds no certificate", f.CA)
		}
		pair, err := tls.LoadX509KeyPair(f.HarnessClientCert, f.HarnessClientKey)
		if err != nil {
			return nil, fmt.Errorf("localcluster: TLS client certificate: %w", err)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	} else if opts.ClusterSecret != "" {
		// The managers serve TLS with the CA derived from the secret; the
		// gates serve plain HTTP, which this transport still speaks.
		cfg, err := derivedClientTLS(opts.ClusterSecret)
		if err != nil {
			return nil, err
		}
		t.TLSClientConfig = cfg
	}
	return t, nil
}

// ManagerClient is an rpc.Client of manager n alone with the credentials
// of a member of the cluster (the cluster secret, or the harness's client
// certificate: what a gate presents) and, when operatorSecret is not empty,
// that operator secret: for tests of the managers' authorization. A call
// is retried while no leader answers (unavailable, not_leader), at most 20
// times; an answered error is returned at once. The caller closes it.
func (c *Cluster) ManagerClient(n *Node, operatorSecret string) *rpc.Client {
	return c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{n.HTTPAddr}, OperatorSecret: operatorSecret,
		AttemptTimeout: 10 * time.Second, MaxAttempts: 20})
}

// OperatorSecret is the managers' operator secret (OperatorSecretFile's).
func (c *Cluster) OperatorSecret() string { return c.opts.OperatorSecret }

func operatorSecretPath(base string) string { return filepath.Join(base, "operator-secret") }

// writeOperatorSecret writes secret to <base>/operator-secret and returns
// it; an empty secret keeps the file's (a cluster restarted from its
// directory), or makes a random one.
func writeOperatorSecret(base, secret string) (string, error) {
	path := operatorSecretPath(base)
	if secret == "" {
		if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 16 {
			return strings.TrimSpace(string(b)), nil
		}
		var r [16]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		secret = hex.EncodeToString(r[:])
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("localcluster: operator secret: %w", err)
	}
	return secret, nil
}

// OperatorSecretFile is the file holding the managers' operator secret:
// what oncectl's --operator-secret-file (ONCE_OPERATOR_SECRET_FILE) takes
// for the operator commands (cluster members, raft, snapshot, gossip); ""
// for an insecure cluster, which has none.
func (c *Cluster) OperatorSecretFile() string {
	if c.opts.Insecure {
		return ""
	}
	return operatorSecretPath(c.opts.BaseDir)
}

// Stop terminates every process: SIGTERM, then SIGKILL after a grace period.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.All() {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop(10 * time.Second) }()
	}
	wg.Wait()
}

// Start starts the node's process (again, after Kill or Stop) on the same
// addresses and data directory.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s is already running", n.Name)
		}
	}
	name := string(n.Role)
	switch {
	case n.Role == RoleManager && n.c.opts.Failpoints:
		name = FaultManagerBinary
	case n.Role == RoleGate && n.c.opts.Failpoints:
		name = FaultGateBinary
	}
	bin := filepath.Join(n.c.opts.BinDir, name)
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), n.c.opts.Env...), n.env...)
	if n.c.opts.Failpoints {
		cmd.Env = append(cmd.Env, faultnet.WANFileEnv+"="+n.wanFile())
	}
	var out io.Writer = f
	if n.c.opts.Stdout != nil {
		out = io.MultiWriter(f, &prefixWriter{w: n.c.opts.Stdout, prefix: []byte(fmt.Sprintf("%-9s| ", n.Name))})
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a terminal's Ctrl-C reaches the runner, which stops
	// the processes in order, not all at once behind its back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.log = cmd, done, f
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	return nil
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// PID returns the current process's PID, or 0.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s was never started", n.Name)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", n.Name)
	default:
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL (kill -9) and waits until the process is gone.
func (n *Node) Kill() error {
	if err := n.signal(syscall.SIGKILL); err != nil {
		return err
	}
	n.wait(0)
	return nil
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (n *Node) Pause() error  { return n.signal(syscall.SIGSTOP) }
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT) }

// Stop sends SIGTERM (after SIGCONT, in case it is paused) and waits up to grace
// for a clean exit, then kills it.
func (n *Node) Stop(grace time.Duration) {
	if n.signal(syscall.SIGCONT) != nil {
		return
	}
	_ = n.signal(syscall.SIGTERM)
	if !n.wait(grace) {
		_ = n.signal(syscall.SIGKILL)
		n.wait(0)
	}
}

// ExitCode returns the last exit code (valid once the process has exited).
func (n *Node) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.ProcessState == nil {
		return -1
	}
	return n.cmd.ProcessState.ExitCode()
}

// wait blocks until the process exits; with a positive timeout it gives up then.
func (n *Node) wait(timeout time.Duration) bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return true
	}
	if timeout <= 0 {
		<-done
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Status reads a manager's status as curl does: GET /rpc/v1/status on its
// RPC port, with the cluster's credentials.
func (c *Cluster) Status(ctx context.Context, n *Node) (rpc.Status, error) {
	var st rpc.Status
	err := c.getJSON(ctx, c.ManagerURL(n, "/rpc/v1/status"), &st)
	return st, err
}

// Leader returns the manager that every reachable manager agrees is the leader.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	var leader *Node
	for _, n := range c.Managers {
		if !n.Running() {
			continue
		}
		st, err := c.Status(ctx, n)
		if err != nil {
			continue
		}
		if st.IsLeader {
			if leader != nil {
				return nil, fmt.Errorf("two managers claim leadership: %s and %s", leader.Name, n.Name)
			}
			leader = n
		}
	}
	if leader == nil {
		return nil, errors.New("no leader")
	}
	return leader, nil
}

// WaitLeader polls until a leader is elected or ctx ends.
func (c *Cluster) WaitLeader(ctx context.Context) (*Node, error) {
	var last error
	for {
		l, err := c.Leader(ctx)
		if err == nil {
			return l, nil
		}
		last = err
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return nil, fmt.Errorf("waiting for a leader: %w (last: %v)", err, last)
		}
	}
}

// WaitReady polls every running gate's /readyz until all answer 200.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for _, g := range c.Gates {
		if !g.Running() {
			continue
		}
		if err := c.WaitGateReady(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// WaitGateReady polls one gate's /readyz until it answers 200.
func (c *Cluster) WaitGateReady(ctx context.Context, g *Node) error {
	url := c.gateScheme() + "://" + g.HTTPAddr + "/readyz"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%s not ready (see %s): %w", g.Name, g.LogPath, err)
		}
	}
}

// Partition cuts the given managers off from all the others (both directions of
// Raft traffic) through the managers' failpoints; Heal restores every link.
// Requires Options.Failpoints.
func (c *Cluster) Partition(ctx context.Context, isolated ...*Node) error {
	in := map[*Node]bool{}
	for _, n := range isolated {
		in[n] = true
	}
	for _, n := range c.Managers {
		var block []string
		for _, m := range c.Managers {
			if m != n && in[m] != in[n] {
				block = append(block, m.RaftAddr)
			}
		}
		if err := c.setBlock(ctx, n, block); err != nil && n.Running() {
			return err
		}
	}
	return nil
}

// Heal removes every partition.
func (c *Cluster) Heal(ctx context.Context) error {
	var first error
	for _, n := range c.Managers {
		if err := c.setBlock(ctx, n, nil); err != nil && n.Running() && first == nil {
			first = err
		}
	}
	return first
}

// SetClockOffset shifts manager n's wall clock by d (negative: behind; 0
// heals) through its clock failpoint. Requires Options.Failpoints.
func (c *Cluster) SetClockOffset(ctx context.Context, n *Node, d time.Duration) error {
	return c.failpoint(ctx, n, http.MethodPut, "clock", map[string]any{"offset": d.String()})
}

// TransferLeadership makes manager to the leader: the current leader hands
// leadership over (raft's LeadershipTransferToServer) through its failpoint.
// Nothing is done when to already leads. Requires Options.Failpoints.
func (c *Cluster) TransferLeadership(ctx context.Context, to *Node) error {
	l, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	if l == to {
		return nil
	}
	return c.failpoint(ctx, l, http.MethodPost, "leader", map[string]any{"id": to.Name})
}

func (c *Cluster) setBlock(ctx context.Context, n *Node, block []string) error {
	if block == nil {
		block = []string{}
	}
	return c.failpoint(ctx, n, http.MethodPut, "partition", map[string]any{"block": block})
}

// failpoint calls one of manager n's /debug/failpoints endpoints.
func (c *Cluster) failpoint(ctx context.Context, n *Node, method, name string, body any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, c.ManagerURL(n, "/debug/failpoints/"+name), bytes.NewReader(b))
	if err != nil {
		return err
	}
	client := c.client
	if name == "leader" { // a leadership transfer takes up to an election timeout
		client = &http.Client{Timeout: 30 * time.Second, Transport: c.client.Transport}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s failpoint on %s: %w", name, n.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s failpoint on %s: HTTP %d: %s", name, n.Name, resp.StatusCode, b)
	}
	return nil
}

func (c *Cluster) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %.200s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// pause waits d or until ctx ends: the polling interval of the Wait helpers.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// prefixWriter prefixes every line written through it (for make run's terminal).
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		line := append(append([]byte{}, p.prefix...), p.buf[:i+1]...)
		if _, err := p.w.Write(line); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// portsFile records the ports New chose, in the order it hands them out, so
// that a cluster started again from the same BaseDir keeps its addresses.
const portsFile = "ports.json"

func loadPorts(base string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(base, portsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ports []int
	if err := json.Unmarshal(b, &ports); err != nil {
		return nil, fmt.Errorf("localcluster: %s: %w", filepath.Join(base, portsFile), err)
	}
	return ports, nil
}

func savePorts(base string, ports []int) error {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(ports)
	return os.WriteFile(filepath.Join(base, portsFile), b, 0o644)
}
