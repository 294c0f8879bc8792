package membership

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/logging"
)

// Keyring operations across the pool: what Consul's `consul keyring` does
// over serf queries, here over memberlist's reliable user messages (TCP,
// encrypted and authenticated with the pool's keyring, so only a holder of
// a pool key can send one). The node asked applies the operation to its own
// keyring, sends it to every alive member, and gathers each member's answer:
// its error, if any, and its keys after the operation. A rotation is three
// calls, each checked on every node before the next (docs/operations.md):
// install the new key, use it, remove the old one.

// KeyringOp is a keyring operation.
type KeyringOp byte

// The operations. The values are on the wire.
const (
	KeyringList    KeyringOp = 1 // nothing changes; every node reports its keys
	KeyringInstall KeyringOp = 2 // InstallKey
	KeyringUse     KeyringOp = 3 // UseKey
	KeyringRemove  KeyringOp = 4 // RemoveKey
)

var keyringOpNames = [...]string{
	KeyringList:    "list",
	KeyringInstall: "install",
	KeyringUse:     "use",
	KeyringRemove:  "remove",
}

func (op KeyringOp) String() string { return nameOf(keyringOpNames[:], int(op), "keyring-op") }

// NodeKeyring is one node's answer to a keyring query.
type NodeKeyring struct {
	Node string
	// Keys are the node's keys after the operation, the primary
	// (encrypting) one first.
	Keys [][]byte
	// Err is the operation's error on that node ("" when it succeeded).
	Err string
}

// KeyringResult is what a keyring query gathered.
type KeyringResult struct {
	// Nodes are the answers, this node's included, sorted by node name.
	Nodes []NodeKeyring
	// NoAnswer are the alive members that did not answer before the
	// query's context ended, sorted.
	NoAnswer []string
}

// Complete reports whether every alive member answered without error.
func (r KeyringResult) Complete() bool {
	if len(r.NoAnswer) > 0 {
		return false
	}
	for _, n := range r.Nodes {
		if n.Err != "" {
			return false
		}
	}
	return true
}

// User message types of the keyring query (msgLeaving is 1).
const (
	msgKeyringQuery byte = 2
	msgKeyringReply byte = 3
)

// maxKeyringReplyKeys bounds the keys a reply may carry (a keyring holds a
// handful during a rotation).
const maxKeyringReplyKeys = 64

// KeyringQuery applies op (with key, except for KeyringList) on this node and
// on every alive member of the pool, and returns every answer gathered
// before ctx ends. An error is returned only when the pool is not encrypted,
// op is unknown or the pool is shut down (ErrShutdown); failures on nodes
// are in the result. A KeyringUse or KeyringRemove first lists every
// member's keys, and is applied nowhere, every answer saying why, when a
// member does not answer or would refuse it (a use of a key it does not
// hold, a remove of its primary key).
func (p *Pool) KeyringQuery(ctx context.Context, op KeyringOp, key []byte) (KeyringResult, error) {
	if err := op.check(); err != nil {
		return KeyringResult{}, err
	}
	if p.keyring == nil {
		return KeyringResult{}, ErrNoEncryption
	}
	if op != KeyringList {
		if err := validateKeyLen(len(key)); err != nil {
			return KeyringResult{}, err
		}
	}
	if op == KeyringUse || op == KeyringRemove {
		// A member that refuses the step while the others apply it is cut
		// off from them: one without the key (it was down during the
		// install, or came back configured with the old keys) cannot read
		// the others once they encrypt with it, and the others cannot read
		// one still encrypting with a key they removed. So the members are
		// asked their keys first, and the step is applied nowhere unless
		// every one answered and every one can take it.
		check, err := p.queryPool(ctx, KeyringList, nil)
		if err != nil {
			return KeyringResult{}, err
		}
		if refused, ok := refuseStep(op, check, key); ok {
			return refused, nil
		}
	}
	return p.queryPool(ctx, op, key)
}

// refuseStep returns check, the members' keys before a use or a remove of
// key, with every answer refusing the step, and true, when a member did not
// answer or would refuse the step: a use of a key it does not hold, a
// remove of its primary key. check is then what the query returns.
func refuseStep(op KeyringOp, check KeyringResult, key []byte) (KeyringResult, bool) {
	var blocking []string
	for _, n := range check.Nodes {
		holds := slices.ContainsFunc(n.Keys, func(k []byte) bool { return bytes.Equal(k, key) })
		primary := len(n.Keys) > 0 && bytes.Equal(n.Keys[0], key)
		if (op == KeyringUse && !holds) || (op == KeyringRemove && primary) {
			blocking = append(blocking, n.Node)
		}
	}
	var why string
	done := "made primary on"
	if op == KeyringRemove {
		done = "removed from"
	}
	switch {
	case len(blocking) > 0 && op == KeyringUse:
		why = "not installed on " + strings.Join(blocking, ", ") + " (run install first)"
	case len(blocking) > 0:
		why = "it is the primary key of " + strings.Join(blocking, ", ") + " (run use with another key first)"
	case len(check.NoAnswer) > 0:
		why = "no answer from " + strings.Join(check.NoAnswer, ", ") + ", which would then be cut off from the others"
	default:
		return KeyringResult{}, false
	}
	for i := range check.Nodes {
		check.Nodes[i].Err = "not " + done + " any member: " + why
	}
	return check, true
}

// queryPool is KeyringQuery once op and key are checked: it applies op on
// this node and sends it to every alive member.
func (p *Pool) queryPool(ctx context.Context, op KeyringOp, key []byte) (KeyringResult, error) {
	// Every member asked is waiting before the first send: a reply is taken
	// whenever it arrives, even while the query is still being sent to the
	// others, and none is ever dropped (the replies go into the query's own
	// record, as many as members were asked, not through a buffer).
	q := &keyringQuery{waiting: map[string]bool{}, done: make(chan struct{})}
	var asked []*memberlist.Node
	for _, n := range p.ml.Members() {
		if n.Name == p.cfg.NodeName || n.State != memberlist.StateAlive {
			continue
		}
		c := *n // memberlist updates its own in place; the sends read a copy
		asked = append(asked, &c)
		q.waiting[n.Name] = true
	}
	q.closeIfDone()
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		return KeyringResult{}, ErrShutdown
	}
	p.querySeq++
	id := p.querySeq
	p.queries[id] = q
	// The sends may outlive this call (see below): the pool's WaitGroup
	// lets Shutdown wait for them. Adding is safe here: the pool is not shut
	// and Shutdown marks it so under mu before it waits.
	p.wg.Add(len(asked))
	p.mu.Unlock()

	var res KeyringResult
	res.Nodes = append(res.Nodes, p.answerKeyringOp(op, key))

	// Each member on its own goroutine, all at once: a member that does not
	// answer TCP (a host gone, not found dead yet) holds its send for
	// memberlist's TCP timeout, and must hold up neither the others nor the
	// end of the query when ctx ends.
	msg := appendKeyringQuery([]byte{msgKeyringQuery}, op, id, p.cfg.NodeName, key)
	for _, n := range asked {
		go func() {
			defer p.wg.Done()
			if err := p.ml.SendReliable(n, msg); err != nil {
				p.mu.Lock()
				q.take(NodeKeyring{Node: n.Name, Err: "unreachable: " + err.Error()})
				p.mu.Unlock()
			}
		}()
	}
	if k := p.cfg.Knobs.KeyringQuerySent; k != nil {
		k()
	}
	select {
	case <-q.done:
	case <-ctx.Done():
	}
	p.mu.Lock()
	delete(p.queries, id) // a later reply finds no query and is ignored
	res.Nodes = append(res.Nodes, q.answers...)
	if len(q.waiting) > 0 {
		res.NoAnswer = slices.Sorted(maps.Keys(q.waiting))
	}
	q.waiting = nil // the query is over: a send failing later changes nothing
	p.mu.Unlock()
	slices.SortFunc(res.Nodes, func(a, b NodeKeyring) int { return strings.Compare(a.Node, b.Node) })
	return res, nil
}

// keyringQuery is a keyring query of this node gathering its replies
// (Pool.queries). Its fields are guarded by Pool.mu.
type keyringQuery struct {
	// waiting are the members asked that have not answered yet.
	waiting map[string]bool
	// answers are the answers of the others.
	answers []NodeKeyring
	// done is closed once no member is waiting.
	done chan struct{}
}

// take records r as the answer of its node if the query is waiting for that
// node, and ignores it otherwise: a second answer, or one from a node not
// asked.
func (q *keyringQuery) take(r NodeKeyring) {
	if !q.waiting[r.Node] {
		return
	}
	delete(q.waiting, r.Node)
	q.answers = append(q.answers, r)
	q.closeIfDone()
}

func (q *keyringQuery) closeIfDone() {
	if len(q.waiting) == 0 {
		close(q.done)
	}
}

// check returns an error wrapping ErrKeyringOp when op is not one of the
// operations.
func (op KeyringOp) check() error {
	if op < KeyringList || op > KeyringRemove {
		return fmt.Errorf("%w: %d", ErrKeyringOp, op)
	}
	return nil
}

// answerKeyringOp applies op on this node and returns this node's answer:
// the operation's error, if any, and the keys after it.
func (p *Pool) answerKeyringOp(op KeyringOp, key []byte) NodeKeyring {
	var err error
	switch op {
	case KeyringList:
	case KeyringInstall:
		err = p.InstallKey(key)
	case KeyringUse:
		err = p.UseKey(key)
	case KeyringRemove:
		err = p.RemoveKey(key)
	default:
		err = op.check()
	}
	answer := NodeKeyring{Node: p.cfg.NodeName, Keys: p.Keys()}
	if err != nil {
		answer.Err = err.Error()
	}
	return answer
}

// handleKeyringQuery answers a query from another node: applies it, then
// sends the reply back over a reliable message. It runs on its own
// goroutine (NotifyMsg must not block memberlist).
func (p *Pool) handleKeyringQuery(b []byte) {
	op, id, from, key, ok := decodeKeyringQuery(b)
	if !ok {
		return
	}
	answer := p.answerKeyringOp(op, key)
	switch {
	case op == KeyringList:
	case answer.Err != "":
		p.log.Warn("pool-wide gossip keyring request failed here", logging.KeyOp, op.String(), logging.KeyPeer, from, logging.KeyError, answer.Err)
	default:
		p.log.Info("gossip keyring changed by a pool-wide request", logging.KeyOp, op.String(), logging.KeyPeer, from)
	}
	reply := appendKeyringReply([]byte{msgKeyringReply}, id, answer)
	for _, m := range p.ml.Members() {
		if m.Name == from {
			if err := p.ml.SendReliable(m, reply); err != nil {
				p.log.Warn("keyring reply not delivered", logging.KeyPeer, from, logging.KeyError, err)
			}
			return
		}
	}
}

// deliverKeyringReply hands a reply to the query waiting for it; a reply
// to a query that has ended (it came too late) is ignored.
func (p *Pool) deliverKeyringReply(b []byte) {
	id, r, ok := decodeKeyringReply(b)
	if !ok {
		return
	}
	p.mu.Lock()
	if q := p.queries[id]; q != nil {
		q.take(r)
	}
	p.mu.Unlock()
	if k := p.cfg.Knobs.KeyringReplyArrived; k != nil {
		k(r.Node)
	}
}

// The messages after their type byte. A field is a uvarint length and that
// many bytes (appendField, cutField).
//
//	query: op (1 byte), query id (8 bytes, big endian), asking node's name
//	       (field), key (the rest)
//	reply: query id (8 bytes, big endian), answering node's name (field),
//	       error (field), key count (uvarint), keys (a field each)

func appendKeyringQuery(b []byte, op KeyringOp, id uint64, from string, key []byte) []byte {
	b = append(b, byte(op))
	b = binary.BigEndian.AppendUint64(b, id)
	b = appendField(b, from)
	return append(b, key...)
}

func decodeKeyringQuery(b []byte) (op KeyringOp, id uint64, from string, key []byte, ok bool) {
	if len(b) < 9 {
		return 0, 0, "", nil, false
	}
	op, id = KeyringOp(b[0]), binary.BigEndian.Uint64(b[1:9])
	name, rest, ok := cutField(b[9:])
	if !ok {
		return 0, 0, "", nil, false
	}
	return op, id, string(name), bytes.Clone(rest), true
}

func appendKeyringReply(b []byte, id uint64, r NodeKeyring) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	b = appendField(b, r.Node)
	b = appendField(b, r.Err)
	b = binary.AppendUvarint(b, uint64(len(r.Keys)))
	for _, k := range r.Keys {
		b = appendField(b, k)
	}
	return b
}

func decodeKeyringReply(b []byte) (uint64, NodeKeyring, bool) {
	if len(b) < 8 {
		return 0, NodeKeyring{}, false
	}
	id := binary.BigEndian.Uint64(b)
	name, b, ok := cutField(b[8:])
	if !ok {
		return 0, NodeKeyring{}, false
	}
	errText, b, ok := cutField(b)
	if !ok {
		return 0, NodeKeyring{}, false
	}
	r := NodeKeyring{Node: string(name), Err: string(errText)}
	count, w := binary.Uvarint(b)
	if w <= 0 || count > maxKeyringReplyKeys {
		return 0, NodeKeyring{}, false
	}
	b = b[w:]
	for range count {
		var k []byte
		if k, b, ok = cutField(b); !ok {
			return 0, NodeKeyring{}, false
		}
		r.Keys = append(r.Keys, bytes.Clone(k))
	}
	return id, r, true
}

// appendField appends v as a field: its length as a uvarint, then v.
func appendField[T string | []byte](b []byte, v T) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// cutField splits the field at the start of b from the rest; ok is false
// when b does not start with a whole field.
func cutField(b []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}
