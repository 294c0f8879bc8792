package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/testutil"
)

// A whole rotation driven from one node: install, use, remove, each applied
// on every member (gates too) through the pool-wide query; every node
// answers with its keys after each step; the pool still gossips with the new
// key only; a node that refuses (removing the primary) reports its error.
func TestKeyringQueryRotatesThePool(t *testing.T) {
	old, next := key(1), key(2)
	pools := managersAndGate(t, old)
	a, b := pools[0], pools[1]
	query := func(op KeyringOp, k []byte) KeyringResult {
		t.Helper()
		res := askKeyring(t, a, op, k)
		if len(res.Nodes) != 3 || len(res.NoAnswer) != 0 {
			t.Fatalf("%s: answers %+v, no answer from %v", op, res.Nodes, res.NoAnswer)
		}
		return res
	}
	wantKeys := func(res KeyringResult, want ...[]byte) {
		t.Helper()
		for _, n := range res.Nodes {
			if n.Err != "" || len(n.Keys) != len(want) {
				t.Fatalf("%s: keys %d, err %q; want %d keys", n.Node, len(n.Keys), n.Err, len(want))
			}
			for i := range want {
				if !bytes.Equal(n.Keys[i], want[i]) {
					t.Fatalf("%s: key %d differs", n.Node, i)
				}
			}
		}
	}
	wantKeys(query(KeyringList, nil), old)
	wantKeys(query(KeyringInstall, next), old, next)
	wantKeys(query(KeyringUse, next), next, old)
	// Removing the primary is refused everywhere, and said so per node.
	res := query(KeyringRemove, next)
	if res.Complete() {
		t.Fatal("removing the primary key succeeded")
	}
	for _, n := range res.Nodes {
		if n.Err == "" {
			t.Fatalf("%s removed its primary key", n.Node)
		}
	}
	wantKeys(query(KeyringRemove, old), next)
	if r := query(KeyringList, nil); !r.Complete() {
		t.Fatalf("list after the rotation: %+v", r)
	}
	// The pool goes on with the new key only: a node that joins with it is
	// seen by every member.
	late := startPool(t, "late", RoleGate, func(c *Config) { c.SecretKey = next; c.Seeds = []string{b.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive(append(pools, late), "a", "b", "g", "late"))
}

func TestKeyringQueryRefusals(t *testing.T) {
	plain := startPool(t, "plain", RoleGate, nil)
	if _, err := plain.KeyringQuery(context.Background(), KeyringList, nil); !errors.Is(err, ErrNoEncryption) {
		t.Fatalf("plaintext pool: %v", err)
	}
	enc := startPool(t, "enc", RoleGate, func(c *Config) { c.SecretKey = key(1) })
	if _, err := enc.KeyringQuery(context.Background(), KeyringInstall, []byte("short")); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("a 5-byte key: %v", err)
	}
	if _, err := enc.KeyringQuery(context.Background(), KeyringOp(9), nil); !errors.Is(err, ErrKeyringOp) {
		t.Fatalf("op 9: %v", err)
	}
	if err := enc.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := enc.KeyringQuery(context.Background(), KeyringList, nil); !errors.Is(err, ErrShutdown) {
		t.Fatalf("after Shutdown: %v", err)
	}
}

func TestDecodeKeyringReplyRefusesDamage(t *testing.T) {
	if _, _, ok := decodeKeyringReply([]byte{1, 2, 3}); ok {
		t.Fatal("a 3-byte reply decoded")
	}
	// id, name "n", no error, 1000 keys: over the bound.
	b := []byte{0, 0, 0, 0, 0, 0, 0, 1, 1, 'n', 0, 0xe8, 0x07}
	if _, _, ok := decodeKeyringReply(b); ok {
		t.Fatal("a reply claiming 1000 keys decoded")
	}
}

// The messages keep their bytes (a rolling upgrade mixes versions) and
// decode back to what was sent.
func TestKeyringMessagesAreStable(t *testing.T) {
	q := appendKeyringQuery(nil, KeyringInstall, 1, "a", []byte{9, 9})
	if want := []byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'a', 9, 9}; !bytes.Equal(q, want) {
		t.Fatalf("query % x, want % x", q, want)
	}
	op, id, from, k, ok := decodeKeyringQuery(q)
	if !ok || op != KeyringInstall || id != 1 || from != "a" || !bytes.Equal(k, []byte{9, 9}) {
		t.Fatalf("query decoded as %v %d %q %v %v", op, id, from, k, ok)
	}
	if _, _, _, _, ok := decodeKeyringQuery(q[:9]); ok {
		t.Fatal("a query without its sender's name decoded")
	}
	r := appendKeyringReply(nil, 1, NodeKeyring{Node: "n", Err: "e", Keys: [][]byte{{7}}})
	if want := []byte{0, 0, 0, 0, 0, 0, 0, 1, 1, 'n', 1, 'e', 1, 1, 7}; !bytes.Equal(r, want) {
		t.Fatalf("reply % x, want % x", r, want)
	}
	id, nk, ok := decodeKeyringReply(r)
	if !ok || id != 1 || nk.Node != "n" || nk.Err != "e" || len(nk.Keys) != 1 || !bytes.Equal(nk.Keys[0], []byte{7}) {
		t.Fatalf("reply decoded as %d %+v %v", id, nk, ok)
	}
}

// Every reply counts, however many arrive before the asking node starts
// reading them: here all of them, while it is held right after starting
// its sends.
// A member's second reply, and a reply from a node it did not ask, change
// nothing. (The gathering once went through a fixed buffer of 64 replies
// and dropped the rest: in a larger pool, members that had applied the
// step were reported as not answering.)
func TestKeyringQueryKeepsRepliesThatArriveDuringTheSends(t *testing.T) {
	k := key(1)
	arrived := make(chan string, 16)
	var a *Pool
	a = startPool(t, "a", RoleManager, func(c *Config) {
		c.SecretKey = k
		c.Knobs.KeyringReplyArrived = func(node string) {
			select {
			case arrived <- node:
			default:
			}
		}
		c.Knobs.KeyringQuerySent = func() {
			got := map[string]bool{}
			testutil.WaitFor(t, waitTimeout, func() (bool, string) {
				for {
					select {
					case n := <-arrived:
						got[n] = true
						continue
					default:
					}
					break
				}
				return len(got) == 3, fmt.Sprintf("every reply to arrive (got %v)", got)
			})
			a.mu.Lock()
			id := a.querySeq
			a.mu.Unlock()
			a.deliverKeyringReply(appendKeyringReply(nil, id, NodeKeyring{Node: "b", Err: "a second answer"}))
			a.deliverKeyringReply(appendKeyringReply(nil, id, NodeKeyring{Node: "stranger"}))
		}
	})
	pools := []*Pool{a}
	for _, name := range []string{"b", "c", "d"} {
		pools = append(pools, startPool(t, name, RoleGate, func(c *Config) { c.SecretKey = k; c.Seeds = []string{a.Addr()} }))
	}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b", "c", "d"))

	res := askKeyring(t, a, KeyringList, nil)
	if !res.Complete() || len(res.Nodes) != 4 {
		t.Fatalf("answers %+v, no answer from %v", res.Nodes, res.NoAnswer)
	}
	for i, want := range []string{"a", "b", "c", "d"} {
		if n := res.Nodes[i]; n.Node != want || n.Err != "" || len(n.Keys) != 1 || !bytes.Equal(n.Keys[0], k) {
			t.Fatalf("answer %d: %+v, want %s's one key", i, n, want)
		}
	}
}

// stallDialTo is a transport whose stream dials to one address, once it is
// set, hang until release is closed (a member that stopped answering TCP
// without being found dead yet: a host gone, a network cut).
type stallDialTo struct {
	memberlist.NodeAwareTransport
	mu      sync.Mutex
	addr    string
	release chan struct{}
}

func (s *stallDialTo) stall(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addr = addr
}

func (s *stallDialTo) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	stall := s.addr != "" && s.addr == a.Addr
	s.mu.Unlock()
	if stall {
		<-s.release
		return nil, errors.New("stalled dial")
	}
	return s.NodeAwareTransport.DialAddressTimeout(a, timeout)
}

// A member that does not answer TCP holds up neither the query nor the
// others: they all get the step and answer, and the query ends with its
// context, naming that member, while the send to it is still stuck. (The
// query once sent to the members one by one: each such member held it for
// memberlist's TCP timeout, 10 s on a LAN, past the operator's 5 s, and
// the members after it got the step only then.)
func TestKeyringQueryIsNotHeldByAMemberThatDoesNotAnswer(t *testing.T) {
	k := key(1)
	release := make(chan struct{})
	releaseDials := sync.OnceFunc(func() { close(release) })
	defer releaseDials()
	var tr *stallDialTo
	a := startPool(t, "a", RoleManager, func(c *Config) {
		c.SecretKey = k
		c.WrapTransport = func(nt memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
			tr = &stallDialTo{NodeAwareTransport: nt, release: release}
			return tr
		}
	})
	pools := []*Pool{a}
	for _, name := range []string{"b", "c", "d"} {
		pools = append(pools, startPool(t, name, RoleGate, func(c *Config) { c.SecretKey = k; c.Seeds = []string{a.Addr()} }))
	}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b", "c", "d"))

	tr.stall(pools[3].Addr())
	type result struct {
		res KeyringResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := a.KeyringQuery(ctx, KeyringList, nil)
		done <- result{res, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(waitTimeout):
		releaseDials() // let the query end, then fail
		<-done
		t.Fatal("the query was held past its context by a member that does not answer")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.res.Nodes) != 3 || len(r.res.NoAnswer) != 1 || r.res.NoAnswer[0] != "d" {
		t.Fatalf("answers %+v, no answer from %v; want a, b and c, and no answer from d", r.res.Nodes, r.res.NoAnswer)
	}
	for i, want := range []string{"a", "b", "c"} {
		if n := r.res.Nodes[i]; n.Node != want || n.Err != "" {
			t.Fatalf("answer %d: %+v, want %s's", i, n, want)
		}
	}
}

// A node's keys read while a key is being removed (two keyring queries
// answered at once on one node, as a list from one manager during a remove
// from another) are whole: memberlist's RemoveKey shifts the keys down in
// the array GetKeys handed out, so reading it unguarded is a data race and
// can list a key twice and miss another.
func TestKeysWhileAKeyIsRemoved(t *testing.T) {
	p := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = key(1) })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			keys := p.Keys()
			seen := map[string]bool{}
			for _, k := range keys {
				if seen[string(k)] {
					t.Errorf("key %x listed twice in %x", k[0], keys)
					return
				}
				seen[string(k)] = true
			}
		}
	}()
	for round := range 50 {
		for b := byte(2); b < 10; b++ {
			if err := p.InstallKey(key(b)); err != nil {
				t.Fatal(err)
			}
		}
		for b := byte(2); b < 10; b++ {
			if err := p.RemoveKey(key(b)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	close(stop)
	wg.Wait()
}

// A reply delayed across a restart of the asking node is not taken as the
// answer to a query of its new run: here the restarted node's query cannot
// reach b, and a reply of b to the first run's query, arriving meanwhile,
// must not count b as having applied the new step. (The ids once started
// at 1 in every run of a node: the first query of the new run had the id of
// the first query of the old, and took that reply.)
func TestKeyringQueryIgnoresAReplyToAnEarlierRun(t *testing.T) {
	k := key(1)
	first := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = k })
	if _, err := first.KeyringQuery(t.Context(), KeyringList, nil); err != nil {
		t.Fatal(err)
	}
	first.mu.Lock()
	oldID := first.querySeq
	first.mu.Unlock()
	if err := first.Shutdown(); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	releaseDials := sync.OnceFunc(func() { close(release) })
	defer releaseDials()
	var tr *stallDialTo
	var a *Pool
	a = startPool(t, "a", RoleManager, func(c *Config) {
		c.SecretKey = k
		c.WrapTransport = func(nt memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
			tr = &stallDialTo{NodeAwareTransport: nt, release: release}
			return tr
		}
		c.Knobs.KeyringQuerySent = func() {
			a.deliverKeyringReply(appendKeyringReply(nil, oldID, NodeKeyring{Node: "b", Keys: [][]byte{k}}))
		}
	})
	b := startPool(t, "b", RoleGate, func(c *Config) { c.SecretKey = k; c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))

	tr.stall(b.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	res, err := a.KeyringQuery(ctx, KeyringList, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes) != 1 || res.Nodes[0].Node != "a" || len(res.NoAnswer) != 1 || res.NoAnswer[0] != "b" {
		t.Fatalf("answers %+v, no answer from %v; want a's only, and no answer from b", res.Nodes, res.NoAnswer)
	}
}

// Removing a key that a member still uses as its primary key (it missed the
// use step) removes it from no member: the others would otherwise no longer
// read that member's gossip, and the pool would split in two. Every answer
// says so; once the member uses the new key too, the remove goes through.
// (The remove was once applied wherever the key was not the primary, and
// only that member refused.)
func TestKeyringRemoveOfAKeyAMemberStillUsesRemovesItNowhere(t *testing.T) {
	old, next := key(1), key(2)
	pools := managersAndGate(t, old)
	a, b, g := pools[0], pools[1], pools[2]
	query := func(op KeyringOp, k []byte) KeyringResult { t.Helper(); return askKeyring(t, a, op, k) }
	if res := query(KeyringInstall, next); !res.Complete() {
		t.Fatalf("install: %+v", res)
	}
	for _, p := range []*Pool{a, b} { // g misses the use step
		if err := p.UseKey(next); err != nil {
			t.Fatal(err)
		}
	}

	res := query(KeyringRemove, old)
	if res.Complete() || len(res.Nodes) != 3 {
		t.Fatalf("remove of g's primary key: %+v, want every member's refusal", res)
	}
	for _, n := range res.Nodes {
		if n.Err == "" || !strings.Contains(n.Err, "primary key of g") {
			t.Fatalf("%s: error %q, want a refusal naming g", n.Node, n.Err)
		}
	}
	for _, p := range pools {
		if keys := p.Keys(); len(keys) != 2 {
			t.Fatalf("%s holds %d keys after the refused remove, want both", p.cfg.NodeName, len(keys))
		}
	}

	if res := query(KeyringUse, next); !res.Complete() {
		t.Fatalf("use: %+v", res)
	}
	if res := query(KeyringRemove, old); !res.Complete() {
		t.Fatalf("remove once no member uses the key: %+v", res)
	}
	waitGossipsUnderNewKey(t, g, a)
}

// A remove is applied nowhere while a member does not answer: that member
// may use the key as its primary key.
func TestKeyringRemoveWithAMemberNotAnsweringRemovesItNowhere(t *testing.T) {
	old, next := key(1), key(2)
	release := make(chan struct{})
	releaseDials := sync.OnceFunc(func() { close(release) })
	defer releaseDials()
	var tr *stallDialTo
	a := startPool(t, "a", RoleManager, func(c *Config) {
		c.SecretKey, c.ExtraKeys = next, [][]byte{old}
		c.WrapTransport = func(nt memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
			tr = &stallDialTo{NodeAwareTransport: nt, release: release}
			return tr
		}
	})
	pools := []*Pool{a}
	for _, name := range []string{"b", "d"} {
		pools = append(pools, startPool(t, name, RoleGate, func(c *Config) {
			c.SecretKey, c.ExtraKeys = next, [][]byte{old}
			c.Seeds = []string{a.Addr()}
		}))
	}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b", "d"))

	tr.stall(pools[2].Addr())
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	res, err := a.KeyringQuery(ctx, KeyringRemove, old)
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete() || len(res.NoAnswer) != 1 || res.NoAnswer[0] != "d" {
		t.Fatalf("remove with d not answering: %+v", res)
	}
	for _, p := range pools[:2] {
		if keys := p.Keys(); len(keys) != 2 {
			t.Fatalf("%s holds %d keys after the refused remove, want both", p.cfg.NodeName, len(keys))
		}
	}
}

// A member that was down during the install, back with the old key only,
// is not cut off by the use step: the key is made primary on no member
// while one does not hold it (it would refuse, and could no longer read the
// others encrypting with the new key). Once it is installed there too, the
// use goes through. (The use was once applied everywhere the key was
// installed, and only that member refused.)
func TestKeyringUseOfAKeyAMemberDoesNotHoldUsesItNowhere(t *testing.T) {
	old, next := key(1), key(2)
	a := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = old })
	b := startPool(t, "b", RoleManager, func(c *Config) { c.SecretKey = old; c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))
	query := func(op KeyringOp, k []byte) KeyringResult { t.Helper(); return askKeyring(t, a, op, k) }
	if res := query(KeyringInstall, next); !res.Complete() || len(res.Nodes) != 2 {
		t.Fatalf("install: %+v", res)
	}
	g := startPool(t, "g", RoleGate, func(c *Config) { c.SecretKey = old; c.Seeds = []string{a.Addr()} })
	pools := []*Pool{a, b, g}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b", "g"))

	res := query(KeyringUse, next)
	if res.Complete() || len(res.Nodes) != 3 {
		t.Fatalf("use of a key g does not hold: %+v, want every member's refusal", res)
	}
	for _, n := range res.Nodes {
		if !strings.Contains(n.Err, "not installed on g") {
			t.Fatalf("%s: error %q, want a refusal naming g", n.Node, n.Err)
		}
	}
	for _, p := range pools {
		if keys := p.Keys(); !bytes.Equal(keys[0], old) {
			t.Fatalf("%s encrypts with the new key after the refused use", p.cfg.NodeName)
		}
	}

	if res := query(KeyringInstall, next); !res.Complete() {
		t.Fatalf("install again: %+v", res)
	}
	if res := query(KeyringUse, next); !res.Complete() {
		t.Fatalf("use once every member holds the key: %+v", res)
	}
	waitGossipsUnderNewKey(t, g, a)
}

// managersAndGate starts managers a and b and gate g, all with key, and
// waits until each sees the others.
func managersAndGate(t *testing.T, key []byte) []*Pool {
	t.Helper()
	a := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = key })
	b := startPool(t, "b", RoleManager, func(c *Config) { c.SecretKey = key; c.Seeds = []string{a.Addr()} })
	g := startPool(t, "g", RoleGate, func(c *Config) { c.SecretKey = key; c.Seeds = []string{a.Addr()} })
	pools := []*Pool{a, b, g}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b", "g"))
	return pools
}

// askKeyring runs a keyring query from p, failing the test on an error.
// Every member answers in these tests, so the query ends with the last
// answer; the minute only bounds a hang.
func askKeyring(t *testing.T, p *Pool, op KeyringOp, k []byte) KeyringResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := p.KeyringQuery(ctx, op, k)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	return res
}
