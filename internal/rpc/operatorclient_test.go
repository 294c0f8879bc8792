package rpc

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// peerOperator is an Operator that answers the leader-only calls only when
// leader (elsewhere not_leader naming leaderRPC), and not_found for a
// remove-peer of an ID it does not have.
type peerOperator struct {
	leader    bool
	leaderRPC string

	mu       sync.Mutex
	calls    int
	removed  []string
	restored []string
	keyring  []*rpcpb.KeyringRequest
	forgot   []string
}

func (p *peerOperator) enter(leaderOnly bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if leaderOnly && !p.leader {
		return &Error{Code: CodeNotLeader, Message: "follower", Leader: p.leaderRPC}
	}
	return nil
}

func (p *peerOperator) Members(context.Context) (*rpcpb.MembersResponse, error) {
	if err := p.enter(false); err != nil {
		return nil, err
	}
	return &rpcpb.MembersResponse{Node: "m1", Members: []*rpcpb.Member{{Name: "m1", Role: "manager"}}}, nil
}

func (p *peerOperator) RemovePeer(_ context.Context, id string) (*rpcpb.PeerResult, error) {
	if err := p.enter(true); err != nil {
		return nil, err
	}
	if id != "m3" {
		return nil, Errorf(CodeNotFound, "no server %s", id)
	}
	p.mu.Lock()
	p.removed = append(p.removed, id)
	p.mu.Unlock()
	return &rpcpb.PeerResult{Done: "removed " + id, Leader: "m1"}, nil
}

func (p *peerOperator) TransferLeader(_ context.Context, id string) (*rpcpb.PeerResult, error) {
	if err := p.enter(true); err != nil {
		return nil, err
	}
	return &rpcpb.PeerResult{Done: "transferred", Leader: "m2"}, nil
}

func (p *peerOperator) Snapshot(_ context.Context, w io.Writer) error {
	if err := p.enter(true); err != nil {
		return err
	}
	_, err := w.Write([]byte("archive-bytes"))
	return err
}

func (p *peerOperator) Restore(_ context.Context, r io.Reader) error {
	if err := p.enter(true); err != nil {
		return err
	}
	b, err := io.ReadAll(r)
	p.mu.Lock()
	p.restored = append(p.restored, string(b))
	p.mu.Unlock()
	return err
}

func (p *peerOperator) Keyring(_ context.Context, req *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	if err := p.enter(false); err != nil {
		return nil, err
	}
	if req.Op == "use" && req.Key == "" {
		return nil, Errorf(CodeInvalid, "key: required")
	}
	p.mu.Lock()
	p.keyring = append(p.keyring, req)
	p.mu.Unlock()
	return &rpcpb.KeyringResponse{Node: "m1", Pool: req.Pool, Op: req.Op, Members: 3, Complete: true}, nil
}

func (p *peerOperator) ForgetDatacenter(_ context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error) {
	if err := p.enter(true); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.forgot = append(p.forgot, dc)
	p.mu.Unlock()
	return &rpcpb.ForgetDatacenterResult{Datacenter: dc, Pairs: 3}, nil
}

const testCluster, testOperator = "cluster-secret-0123456789", "operator-secret-0123456789"

// serveOperator serves op's methods behind the cluster and operator secrets.
func serveOperator(t *testing.T, op Operator) string {
	t.Helper()
	addr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: testCluster, Operator: op, OperatorAuth: OperatorAuth{Secret: testOperator}})
	return addr
}

// operatorClient is a client whose attempts are answered: each may take a
// minute, far more than a loaded machine needs, so only the caller's
// context ends one.
func operatorClient(t *testing.T, operatorSecret string, maxAttempts int, addrs ...string) *Client {
	t.Helper()
	c := NewClient(ClientConfig{Resolver: StaticResolver(addrs), AttemptTimeout: time.Minute,
		Secret: testCluster, OperatorSecret: operatorSecret, MaxAttempts: maxAttempts})
	t.Cleanup(c.Close)
	return c
}

// The operator calls reach the leader through a follower's hint, carry the
// operator secret, and return the leader's answers; an error answer is
// returned at once, as its *Error.
func TestOperatorClientFollowsTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader := &peerOperator{leader: true}
	laddr := serveOperator(t, leader)
	follower := &peerOperator{leaderRPC: laddr}
	faddr := serveOperator(t, follower)

	// Reads answer on the manager asked.
	c := operatorClient(t, testOperator, 4, faddr)
	m, err := c.Members(ctx)
	if err != nil || m.Node != "m1" || len(m.Members) != 1 {
		t.Fatalf("members: %+v, %v", m, err)
	}
	k, err := c.Keyring(ctx, PoolWAN)
	if err != nil || k.Pool != PoolWAN || k.Op != "list" || !k.Complete {
		t.Fatalf("keyring list: %+v, %v", k, err)
	}
	k, err = c.ChangeKeyring(ctx, &rpcpb.KeyringRequest{Op: "install", Key: "a2V5", Pool: PoolLAN})
	if err != nil || k.Op != "install" || k.Members != 3 {
		t.Fatalf("keyring install: %+v, %v", k, err)
	}
	if len(follower.keyring) != 2 || follower.keyring[1].Key != "a2V5" {
		t.Fatalf("the follower ran %+v, want list then install", follower.keyring)
	}

	// Changes and the snapshot follow the hint to the leader.
	c = operatorClient(t, testOperator, 4, faddr)
	res, err := c.RemovePeer(ctx, "m3")
	if err != nil || res.Done != "removed m3" || res.Leader != "m1" {
		t.Fatalf("remove-peer: %+v, %v", res, err)
	}
	if len(leader.removed) != 1 || c.Leader() != laddr {
		t.Fatalf("leader removed %v, client's leader %q, want [m3] at %s", leader.removed, c.Leader(), laddr)
	}
	if res, err := c.TransferLeader(ctx, ""); err != nil || res.Leader != "m2" {
		t.Fatalf("transfer-leader: %+v, %v", res, err)
	}
	var archive bytes.Buffer
	if err := c.Snapshot(ctx, &archive); err != nil || archive.String() != "archive-bytes" {
		t.Fatalf("snapshot: %q, %v", archive.String(), err)
	}
	if err := c.Restore(ctx, strings.NewReader("the archive")); err != nil {
		t.Fatal(err)
	}
	if len(leader.restored) != 1 || leader.restored[0] != "the archive" {
		t.Fatalf("leader restored %q", leader.restored)
	}
	if res, err := c.ForgetDatacenter(ctx, "dc2"); err != nil || res.Datacenter != "dc2" || res.Pairs != 3 ||
		len(leader.forgot) != 1 || len(follower.forgot) != 0 {
		t.Fatalf("forget datacenter: %+v, %v; the leader forgot %v, the follower %v", res, err, leader.forgot, follower.forgot)
	}

	// An error answer: returned as it is, not retried.
	calls := leader.calls
	_, err = c.RemovePeer(ctx, "m9")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove-peer of an unknown server: %v, want not_found", err)
	}
	if leader.calls != calls+1 {
		t.Fatalf("not_found was retried: %d calls", leader.calls-calls)
	}
	_, err = c.ChangeKeyring(ctx, &rpcpb.KeyringRequest{Op: "use", Pool: PoolLAN})
	if !errors.As(err, &e) || e.Code != CodeInvalid {
		t.Fatalf("keyring use without a key: %v, want invalid", err)
	}
	calls = leader.calls
	if _, err = c.ForgetDatacenter(ctx, ""); !errors.As(err, &e) || e.Code != CodeInvalid || leader.calls != calls {
		t.Fatalf("forget datacenter without a datacenter: %v (%d calls reached the leader), want invalid, refused by the server", err, leader.calls-calls)
	}
}

// Without the operator secret every operator call is forbidden, at once,
// and none reaches the manager.
func TestOperatorClientWithoutTheOperatorSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op := &peerOperator{leader: true}
	c := operatorClient(t, "", 0, serveOperator(t, op))
	_, err := c.Members(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeForbidden {
		t.Fatalf("members without the operator secret: %v, want forbidden", err)
	}
	if err := c.Snapshot(ctx, io.Discard); !errors.As(err, &e) || e.Code != CodeForbidden {
		t.Fatalf("snapshot without the operator secret: %v, want forbidden", err)
	}
	if _, err := c.RemovePeer(ctx, "m3"); !errors.As(err, &e) || e.Code != CodeForbidden {
		t.Fatalf("remove-peer without the operator secret: %v, want forbidden", err)
	}
	if op.calls != 0 {
		t.Fatalf("%d calls reached the manager", op.calls)
	}
}

// MaxAttempts ends a call against managers that do not answer before the
// caller's deadline, with an error matching ErrUnavailable.
func TestClientMaxAttempts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := operatorClient(t, testOperator, 3, dead)
	start := time.Now()
	_, err = c.Members(ctx)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("members of a dead manager: %v, want unavailable after 3 attempts", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the call waited %s, for the deadline", time.Since(start))
	}
}

// cutOperator's snapshot answers unavailable the first time, then sends a
// chunk and fails.
type cutOperator struct {
	peerOperator
	snapshots atomic.Int32
}

func (c *cutOperator) Snapshot(_ context.Context, w io.Writer) error {
	if c.snapshots.Add(1) == 1 {
		return Errorf(CodeUnavailable, "no leader yet")
	}
	if _, err := w.Write(make([]byte, snapshotChunkBytes)); err != nil {
		return err
	}
	return errors.New("the disk went away")
}

// A snapshot cut after its first chunk is not retried (the writer holds
// part of an archive); one that fails before it is.
func TestSnapshotNotRetriedOnceWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op := &cutOperator{}
	c := operatorClient(t, testOperator, 5, serveOperator(t, op))
	var got bytes.Buffer
	err := c.Snapshot(ctx, &got)
	if err == nil || got.Len() != snapshotChunkBytes {
		t.Fatalf("cut snapshot: wrote %d bytes, %v; want an error after %d", got.Len(), err, snapshotChunkBytes)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInternal || !strings.Contains(err.Error(), "cut after") {
		t.Fatalf("cut snapshot: %v, want the manager's internal error, cut after the chunk", err)
	}
	if n := op.snapshots.Load(); n != 2 {
		t.Fatalf("%d snapshot calls, want 2 (one unavailable, retried; one cut, not retried)", n)
	}
}

// archiveOperator keeps what it is restored and answers it back as its
// snapshot.
type archiveOperator struct {
	peerOperator
	amu     sync.Mutex
	archive []byte
}

func (a *archiveOperator) Snapshot(_ context.Context, w io.Writer) error {
	_, err := w.Write(a.restored())
	return err
}

func (a *archiveOperator) Restore(_ context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	a.amu.Lock()
	a.archive = b
	a.amu.Unlock()
	return err
}

func (a *archiveOperator) restored() []byte {
	a.amu.Lock()
	defer a.amu.Unlock()
	return a.archive
}

// An archive of several chunks crosses whole both ways (chunks of
// snapshotChunkBytes), and a restore a follower refused is sent again, from
// its start, to the leader it named.
func TestSnapshotAndRestoreInChunks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := &archiveOperator{}
	laddr := serveOperator(t, op)
	follower := &peerOperator{leaderRPC: laddr}
	c := operatorClient(t, testOperator, 3, serveOperator(t, follower))
	archive := make([]byte, 3*snapshotChunkBytes+12345)
	for i := range archive {
		archive[i] = byte(i * 7)
	}
	// Sent first to a follower, which refuses it before reading (not_leader),
	// then again from its start to the leader.
	if err := c.Restore(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	follower.mu.Lock()
	fcalls := follower.calls
	follower.mu.Unlock()
	if fcalls != 1 || c.Leader() != laddr {
		t.Fatalf("the follower was asked %d times, the client's leader is %q; want once, then %s", fcalls, c.Leader(), laddr)
	}
	if got := op.restored(); !bytes.Equal(got, archive) {
		t.Fatalf("restored %d bytes, want the %d of the archive", len(got), len(archive))
	}
	var got bytes.Buffer
	if err := c.Snapshot(ctx, &got); err != nil || !bytes.Equal(got.Bytes(), archive) {
		t.Fatalf("snapshot: %d bytes, %v; want the %d restored", got.Len(), err, len(archive))
	}
	// A reader that cannot seek is sent once, and its answer returned.
	if err := c.Restore(ctx, io.MultiReader(bytes.NewReader(archive[:10]))); err != nil || len(op.restored()) != 10 {
		t.Fatalf("restore from a plain reader: %d bytes, %v", len(op.restored()), err)
	}
}

// lostRemoval is a leader whose first remove-peer removes the server and
// then fails as a leader that lost its office while committing does
// (unavailable): the removal happened, the answer did not arrive.
type lostRemoval struct {
	peerOperator
	gone bool
}

func (p *lostRemoval) RemovePeer(ctx context.Context, id string) (*rpcpb.PeerResult, error) {
	p.mu.Lock()
	gone := p.gone
	p.gone = true
	p.mu.Unlock()
	if gone {
		return nil, Errorf(CodeNotFound, "no server %s", id)
	}
	if _, err := p.peerOperator.RemovePeer(ctx, id); err != nil {
		return nil, err
	}
	return nil, Errorf(CodeUnavailable, "removing %s: leadership lost (it may still be committed)", id)
}

// A remove-peer whose first attempt removed the server but lost its answer
// is done, not not_found, when its retry finds the server gone; without
// such an attempt, not_found stays an error (TestOperatorClientFollowsTheLeader).
func TestRemovePeerRetryAfterALostAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op := &lostRemoval{peerOperator: peerOperator{leader: true}}
	c := operatorClient(t, testOperator, 4, serveOperator(t, op))
	res, err := c.RemovePeer(ctx, "m3")
	if err != nil {
		t.Fatalf("remove-peer after a lost answer: %v, want done", err)
	}
	if !strings.Contains(res.Done, "m3 is not in the Raft configuration") {
		t.Fatalf("remove-peer after a lost answer: %q", res.Done)
	}
	if len(op.removed) != 1 || op.calls != 1 {
		t.Fatalf("removed %v in %d calls", op.removed, op.calls)
	}
}

// A manager of the list that refuses connections (dead) says nothing about
// the removal: a remove-peer of an ID the leader does not hold stays
// not_found after it, never "may have been removed".
func TestRemovePeerAfterADeadManagerIsNotFound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	leader := &peerOperator{leader: true}
	// The client tries the second address first (round robin from 1).
	c := operatorClient(t, testOperator, 4, serveOperator(t, leader), dead)
	_, err = c.RemovePeer(ctx, "m9")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound {
		t.Fatalf("remove-peer of an unknown server after a dead manager: %v, want not_found", err)
	}
	if leader.calls != 1 {
		t.Fatalf("the leader was asked %d times, want 1 (the dead manager first)", leader.calls)
	}
}

// The operator reads and keyring changes run on whichever manager is asked:
// a follower's answer does not make it the client's leader.
func TestOperatorReadsOfAFollowerAreNotTakenForTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	laddr := serveOperator(t, &peerOperator{leader: true})
	faddr := serveOperator(t, &peerOperator{leaderRPC: laddr})
	c := operatorClient(t, testOperator, 4, faddr)
	if _, err := c.Members(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Keyring(ctx, PoolLAN); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ChangeKeyring(ctx, &rpcpb.KeyringRequest{Op: "install", Key: "a2V5", Pool: PoolLAN}); err != nil {
		t.Fatal(err)
	}
	if got := c.Leader(); got == faddr {
		t.Fatalf("Leader() = %s, the follower that answered", got)
	}
}

// transferGroup is two managers, m1 and m2, and who of them leads. The
// first transfer moves leadership and is answered unavailable, as a Raft
// transfer that timed out before its target won the election it started
// is; the others are answered as a manager answers them: not_leader
// naming the leader, invalid for a transfer to the leader itself.
type transferGroup struct {
	mu        sync.Mutex
	leader    string            // the node ID of the leader
	addrs     map[string]string // RPC addresses by node ID
	transfers int
}

func (g *transferGroup) other(id string) string {
	if id == "m1" {
		return "m2"
	}
	return "m1"
}

// transferNode is one manager of a transferGroup: its Status and its
// TransferLeader.
type transferNode struct {
	*fakeManager
	peerOperator
	g  *transferGroup
	id string
}

func (n *transferNode) Status(context.Context) (*Status, error) {
	n.g.mu.Lock()
	defer n.g.mu.Unlock()
	return &Status{NodeID: n.id, IsLeader: n.g.leader == n.id, LeaderID: n.g.leader, LeaderRPC: n.g.addrs[n.g.leader]}, nil
}

func (n *transferNode) TransferLeader(_ context.Context, id string) (*rpcpb.PeerResult, error) {
	g := n.g
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.leader != n.id:
		return nil, &Error{Code: CodeNotLeader, Message: "follower", Leader: g.addrs[g.leader]}
	case id == n.id:
		return nil, Errorf(CodeInvalid, "%s already leads", id)
	}
	g.transfers++
	g.leader = cmp.Or(id, g.other(n.id))
	if g.transfers == 1 {
		return nil, Errorf(CodeUnavailable, "leadership transfer: leadership transfer timeout")
	}
	return &rpcpb.PeerResult{Done: "leadership transferred", Leader: g.leader}, nil
}

// startTransferGroup serves m1 (the leader) and m2.
func startTransferGroup(t *testing.T) (*transferGroup, []string) {
	g := &transferGroup{leader: "m1", addrs: map[string]string{}}
	var addrs []string
	for _, id := range []string{"m1", "m2"} {
		n := &transferNode{fakeManager: &fakeManager{}, g: g, id: id}
		addr, _ := serveConfig(t, n, ServerConfig{Secret: testCluster, Operator: n, OperatorAuth: OperatorAuth{Secret: testOperator}})
		g.mu.Lock()
		g.addrs[id] = addr
		g.mu.Unlock()
		addrs = append(addrs, addr)
	}
	return g, addrs
}

// A transfer whose first attempt moved leadership but was answered
// unavailable is done when its retry finds the leader moved: without a
// target it does not move leadership a second time, and with one it does
// not report that the target "already leads" as a failure.
func TestTransferLeaderRetryAfterALateTransfer(t *testing.T) {
	for _, id := range []string{"", "m2"} {
		t.Run("id="+id, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			g, addrs := startTransferGroup(t)
			c := operatorClient(t, testOperator, 6, addrs...)
			res, err := c.TransferLeader(ctx, id)
			if err != nil {
				t.Fatalf("transfer-leader after a late transfer: %v, want done", err)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.transfers != 1 || g.leader != "m2" || res.Leader != "m2" {
				t.Fatalf("%d transfers, leader %s, answered %+v; want one transfer, to m2, answered", g.transfers, g.leader, res)
			}
		})
	}
}

// A transfer that was never made is made by the retry: an attempt answered
// unavailable before the manager led (a new leader catching up) proves
// nothing moved.
func TestTransferLeaderRetryAfterUnavailableTransfers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, addrs := startTransferGroup(t)
	g.mu.Lock()
	g.transfers = 1 // the next transfer is answered
	g.mu.Unlock()
	op := &catchingUp{transferNode: &transferNode{fakeManager: &fakeManager{}, g: g, id: "m1"}}
	addr, _ := serveConfig(t, op.transferNode, ServerConfig{Secret: testCluster, Operator: op, OperatorAuth: OperatorAuth{Secret: testOperator}})
	g.mu.Lock()
	g.addrs["m1"] = addr
	g.mu.Unlock()
	c := operatorClient(t, testOperator, 6, addr, addrs[1])
	res, err := c.TransferLeader(ctx, "")
	if err != nil || res.Leader != "m2" {
		t.Fatalf("transfer-leader: %+v, %v; want done, to m2", res, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.transfers != 2 || op.refused.Load() != 1 {
		t.Fatalf("%d transfers after %d refusals; want the one made after one refusal", g.transfers-1, op.refused.Load())
	}
}

// catchingUp is m1 answering its first transfer unavailable, as a leader
// still catching up does, without transferring.
type catchingUp struct {
	*transferNode
	refused atomic.Int32
}

func (c *catchingUp) TransferLeader(ctx context.Context, id string) (*rpcpb.PeerResult, error) {
	if c.refused.CompareAndSwap(0, 1) {
		return nil, Errorf(CodeUnavailable, "new leader is catching up")
	}
	return c.transferNode.TransferLeader(ctx, id)
}

// slowRestore reads the whole archive and answers only when its caller
// has left, as a leader still installing a large archive at the attempt's
// deadline does: once it has read the archive, late passes the deadline of
// the client's attempt.
type slowRestore struct {
	peerOperator
	restores atomic.Int32
	late     func()
}

func (s *slowRestore) Restore(ctx context.Context, r io.Reader) error {
	s.restores.Add(1)
	if _, err := io.ReadAll(r); err != nil {
		return err
	}
	s.late()
	<-ctx.Done()
	return Errorf(CodeUnavailable, "too late")
}

// heldDeadline is an attempt's context whose deadline passes when the test
// calls pass, not at a time, so that no machine, however slow, reaches it
// before the test's condition holds. It ends with its parent too, and is
// cancelled as a context.WithTimeout is.
type heldDeadline struct {
	context.Context // the parent: its values, and its deadline for gRPC's grpc-timeout
	done            chan struct{}
	once            sync.Once
	err             error
}

// holdDeadlines makes every attempt of c on its unary connection end by a
// heldDeadline, not by AttemptTimeout; last returns the latest attempt's.
func holdDeadlines(c *Client) (last func() *heldDeadline) {
	var latest atomic.Pointer[heldDeadline]
	c.attemptContext = func(parent context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
		d := &heldDeadline{Context: parent, done: make(chan struct{})}
		stop := context.AfterFunc(parent, func() { d.end(parent.Err()) })
		latest.Store(d)
		return d, func() { stop(); d.end(context.Canceled) }
	}
	return latest.Load
}

func (d *heldDeadline) end(err error) {
	d.once.Do(func() {
		d.err = err
		close(d.done)
	})
}

// pass makes the deadline pass: the attempt ends with DeadlineExceeded.
func (d *heldDeadline) pass() { d.end(context.DeadlineExceeded) }

func (d *heldDeadline) Done() <-chan struct{} { return d.done }

func (d *heldDeadline) Err() error {
	select {
	case <-d.done:
		return d.err
	default:
		return nil
	}
}

// A restore whose whole archive was sent and whose answer did not come
// before the attempt's deadline is not sent again: the leader may have
// installed it, and a second restore would erase what was admitted after
// the first. The deadline passes once the manager has read the whole
// archive, however long the machine took to send it.
func TestRestoreNotResentAfterALostAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := &slowRestore{}
	c := operatorClient(t, testOperator, 4, serveOperator(t, op))
	attempt := holdDeadlines(c)
	op.late = func() { attempt().pass() }
	err := c.Restore(ctx, bytes.NewReader(make([]byte, snapshotChunkBytes+10)))
	if err == nil {
		t.Fatal("restore without an answer: done, want an error")
	}
	if n := op.restores.Load(); n != 1 {
		t.Fatalf("the archive was sent %d times, want once (%v)", n, err)
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("restore without an answer: %v, want its attempt's deadline", err)
	}
}

// cutRestore reads the first bytes of an archive and then waits, as a
// manager whose connection is about to be cut does.
type cutRestore struct {
	peerOperator
	started chan struct{}
}

func (c *cutRestore) Restore(ctx context.Context, r io.Reader) error {
	if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
		return err
	}
	close(c.started)
	<-ctx.Done()
	return ctx.Err()
}

// A restore whose connection is cut while its archive is being sent (the
// manager has not received all of it, so cannot have installed it) is an
// attempt that failed like any other: a seekable archive is sent again,
// from its start, to the next manager, not refused as possibly installed.
func TestRestoreCutWhileSendingIsSentAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut := &cutRestore{started: make(chan struct{})}
	cutAddr, cutSrv := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: testCluster, Operator: cut, OperatorAuth: OperatorAuth{Secret: testOperator}})
	next := &archiveOperator{}
	nextAddr := serveOperator(t, next)
	// pick's round robin starts with the second address: cutAddr first.
	// 16 MiB take seconds under -race on a loaded machine: an attempt may
	// take a minute, so that only the cut ends one.
	c := NewClient(ClientConfig{Resolver: StaticResolver{nextAddr, cutAddr}, AttemptTimeout: time.Minute,
		Secret: testCluster, OperatorSecret: testOperator, MaxAttempts: 4})
	t.Cleanup(c.Close)
	archive := make([]byte, 16*snapshotChunkBytes) // far over what flow control lets through unread
	for i := range archive {
		archive[i] = byte(i % 251)
	}
	done := make(chan error, 1)
	go func() { done <- c.Restore(ctx, bytes.NewReader(archive)) }()
	select {
	case <-cut.started:
	case err := <-done:
		t.Fatalf("restore ended before it reached the first manager: %v", err)
	}
	_ = cutSrv.Close() // the connection is cut with most of the archive unsent
	if err := <-done; err != nil {
		t.Fatalf("restore cut while sending: %v, want it sent again to the next manager", err)
	}
	if got := next.restored(); !bytes.Equal(got, archive) {
		t.Fatalf("the next manager restored %d bytes, want the archive's %d", len(got), len(archive))
	}
}
