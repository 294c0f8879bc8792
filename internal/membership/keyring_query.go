package membership

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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

func (op KeyringOp) String() string {
	switch op {
	case KeyringList:
		return "list"
	case KeyringInstall:
		return "install"
	case KeyringUse:
		return "use"
	case KeyringRemove:
		return "remove"
	}
	return fmt.Sprintf("keyring-op(%d)", byte(op))
}

// ErrKeyringOp: an unknown KeyringOp.
var ErrKeyringOp = errors.New("membership: unknown keyring operation")

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
// before ctx ends. An error is returned only when the pool is not encrypted
// or op is unknown; failures on nodes are in the result.
func (p *Pool) KeyringQuery(ctx context.Context, op KeyringOp, key []byte) (KeyringResult, error) {
	if op < KeyringList || op > KeyringRemove {
		return KeyringResult{}, fmt.Errorf("%w: %d", ErrKeyringOp, op)
	}
	if p.keyring == nil {
		return KeyringResult{}, ErrNoEncryption
	}
	if op != KeyringList {
		if err := validateKeyLen(len(key)); err != nil {
			return KeyringResult{}, err
		}
	}
	var res KeyringResult
	self := NodeKeyring{Node: p.cfg.NodeName}
	if err := p.applyKeyringOp(op, key); err != nil {
		self.Err = err.Error()
	}
	self.Keys = p.Keys()
	res.Nodes = append(res.Nodes, self)

	p.mu.Lock()
	p.querySeq++
	id := p.querySeq
	replies := make(chan NodeKeyring, 64)
	p.queries[id] = replies
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.queries, id)
		p.mu.Unlock()
	}()

	msg := []byte{msgKeyringQuery, byte(op)}
	msg = binary.BigEndian.AppendUint64(msg, id)
	msg = binary.AppendUvarint(msg, uint64(len(p.cfg.NodeName)))
	msg = append(msg, p.cfg.NodeName...)
	msg = append(msg, key...)
	waiting := map[string]bool{}
	for _, n := range p.ml.Members() {
		if n.Name == p.cfg.NodeName || n.State != memberlist.StateAlive {
			continue
		}
		waiting[n.Name] = true
		if err := p.ml.SendReliable(n, msg); err != nil {
			delete(waiting, n.Name)
			res.Nodes = append(res.Nodes, NodeKeyring{Node: n.Name, Err: "unreachable: " + err.Error()})
		}
	}
	for len(waiting) > 0 {
		select {
		case r := <-replies:
			if waiting[r.Node] {
				delete(waiting, r.Node)
				res.Nodes = append(res.Nodes, r)
			}
		case <-ctx.Done():
			for n := range waiting {
				res.NoAnswer = append(res.NoAnswer, n)
			}
			waiting = nil
		}
	}
	slices.SortFunc(res.Nodes, func(a, b NodeKeyring) int { return strings.Compare(a.Node, b.Node) })
	slices.Sort(res.NoAnswer)
	return res, nil
}

func (p *Pool) applyKeyringOp(op KeyringOp, key []byte) error {
	switch op {
	case KeyringInstall:
		return p.InstallKey(key)
	case KeyringUse:
		return p.UseKey(key)
	case KeyringRemove:
		return p.RemoveKey(key)
	}
	return nil
}

// handleKeyringQuery answers a query from another node: applies it, then
// sends the reply back over a reliable message. It runs on its own
// goroutine (NotifyMsg must not block memberlist).
func (p *Pool) handleKeyringQuery(b []byte) {
	if len(b) < 10 {
		return
	}
	op := KeyringOp(b[0])
	id := binary.BigEndian.Uint64(b[1:9])
	n, w := binary.Uvarint(b[9:])
	if w <= 0 || n > uint64(len(b)-9-w) {
		return
	}
	from := string(b[9+w : 9+w+int(n)])
	key := bytes.Clone(b[9+w+int(n):])
	var errText string
	if op < KeyringList || op > KeyringRemove {
		errText = fmt.Sprintf("%v: %d", ErrKeyringOp, op)
	} else if err := p.applyKeyringOp(op, key); err != nil {
		errText = err.Error()
	}
	switch {
	case op == KeyringList:
	case errText != "":
		p.log.Warn("pool-wide gossip keyring request failed here", logging.KeyOp, op.String(), logging.KeyPeer, from, logging.KeyError, errText)
	default:
		p.log.Info("gossip keyring changed by a pool-wide request", logging.KeyOp, op.String(), logging.KeyPeer, from)
	}
	reply := []byte{msgKeyringReply}
	reply = binary.BigEndian.AppendUint64(reply, id)
	for _, s := range []string{p.cfg.NodeName, errText} {
		reply = binary.AppendUvarint(reply, uint64(len(s)))
		reply = append(reply, s...)
	}
	keys := p.Keys()
	reply = binary.AppendUvarint(reply, uint64(len(keys)))
	for _, k := range keys {
		reply = binary.AppendUvarint(reply, uint64(len(k)))
		reply = append(reply, k...)
	}
	for _, m := range p.ml.Members() {
		if m.Name == from {
			if err := p.ml.SendReliable(m, reply); err != nil {
				p.log.Warn("keyring reply not delivered", logging.KeyPeer, from, logging.KeyError, err)
			}
			return
		}
	}
}

// decodeKeyringReply decodes what handleKeyringQuery sends (after the type
// byte): the query id and the answer.
func decodeKeyringReply(b []byte) (uint64, NodeKeyring, bool) {
	if len(b) < 8 {
		return 0, NodeKeyring{}, false
	}
	id := binary.BigEndian.Uint64(b)
	b = b[8:]
	next := func() ([]byte, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, false
		}
		v := b[w : w+int(n)]
		b = b[w+int(n):]
		return v, true
	}
	var r NodeKeyring
	name, ok1 := next()
	errText, ok2 := next()
	if !ok1 || !ok2 {
		return 0, NodeKeyring{}, false
	}
	r.Node, r.Err = string(name), string(errText)
	count, w := binary.Uvarint(b)
	if w <= 0 || count > maxKeyringReplyKeys {
		return 0, NodeKeyring{}, false
	}
	b = b[w:]
	for range count {
		k, ok := next()
		if !ok {
			return 0, NodeKeyring{}, false
		}
		r.Keys = append(r.Keys, bytes.Clone(k))
	}
	return id, r, true
}

// deliverKeyringReply hands a reply to the query waiting for it.
func (p *Pool) deliverKeyringReply(b []byte) {
	id, r, ok := decodeKeyringReply(b)
	if !ok {
		return
	}
	p.mu.Lock()
	ch := p.queries[id]
	p.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- r:
	default: // the query's buffer is full: it gathers what it can
	}
}
