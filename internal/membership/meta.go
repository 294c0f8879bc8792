package membership

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// Role of a node in the pool.
type Role string

// Roles.
const (
	RoleGate    Role = "gate"
	RoleManager Role = "manager"
)

// Meta is what a node tells the pool about itself; memberlist carries it in
// every alive message (at most memberlist.MetaMaxSize = 512 bytes encoded).
type Meta struct {
	Role       Role
	Datacenter string
	// NodeID is the node's stable identity; for a manager it is its Raft
	// server ID.
	NodeID string
	// RPCAddr is the manager's internal RPC listener (host:port).
	RPCAddr string
	// RaftAddr is the manager's Raft transport address (host:port);
	// required for managers.
	RaftAddr string
	// HasRaftState is true once the manager holds Raft state (it bootstrapped,
	// was added by a leader, or restarted on a data directory with state). It
	// is sticky: Pool.UpdateMeta cannot turn it back to false.
	HasRaftState bool
	// Version is the node's once protocol version (for rolling upgrades; not
	// the encoding's version, which the encoding carries itself).
	Version int

	// Bootstrap is owned by the autopilot (see internal/autopilot);
	// Pool.UpdateMeta keeps the current value, Pool.ModifyMeta may change it.
	Bootstrap BootstrapMeta
	// Leaving is set by Pool.Leave just before the memberlist leave, so the
	// others can tell a graceful leave from a failure. UpdateMeta keeps it.
	Leaving bool
	// Settings is the node's settings that must agree across the federation,
	// in the canonical form of config.Idempotency.Canonical
	// ("pending_ttl=60s committed_ttl=300s ..."); empty when not published.
	// Gates and managers publish it; managers compare it with theirs to
	// report configuration mismatches.
	Settings string
}

// BootstrapMeta is the manager's part in the bootstrap_expect protocol.
type BootstrapMeta struct {
	// Expect is the manager's bootstrap_expect (0: it will not bootstrap).
	Expect int
	// Vote is the fingerprint of the set of managers this manager has seen
	// (0: no vote).
	Vote uint64
}

// Encoding, format 1 (all integers unsigned varints unless noted):
//
//	byte    format (1)
//	byte    role (1 gate, 2 manager)
//	byte    flags (bit 0 HasRaftState, bit 1 Leaving, bit 2 vote present)
//	uvarint Version
//	uvarint Bootstrap.Expect
//	8 bytes Bootstrap.Vote, big endian (only when flag bit 2 is set)
//	string  Datacenter, NodeID, RPCAddr, RaftAddr (each uvarint length + bytes)
//	string  Settings (revision 2 of format 1; absent in revision 1: empty)
//
// Later revisions of format 1 may append fields; decoders ignore trailing
// bytes. An incompatible change takes a new format byte, which older decoders
// refuse with ErrMetaFormat.
const metaFormat1 = 1

const (
	flagHasRaftState = 1 << iota
	flagLeaving
	flagVote
)

// roleBytes are the roles by their byte in the encoding.
var roleBytes = [...]Role{1: RoleGate, 2: RoleManager}

// MaxMetaSize is the largest encoded Meta memberlist accepts.
const MaxMetaSize = memberlist.MetaMaxSize

// Validate checks the fields a node must set before it joins a pool.
func (m Meta) Validate() error {
	if _, err := m.roleByte(); err != nil {
		return err
	}
	if m.Datacenter == "" || len(m.Datacenter) > maxDatacenterLen {
		return &MetaError{Field: "Datacenter", Value: m.Datacenter, Err: ErrInvalidMeta, Reason: "required, at most 128 bytes"}
	}
	if m.NodeID == "" {
		return &MetaError{Field: "NodeID", Err: ErrInvalidMeta, Reason: "required"}
	}
	if m.Role == RoleManager && m.RaftAddr == "" {
		return &MetaError{Field: "RaftAddr", Err: ErrInvalidMeta, Reason: "required for a manager"}
	}
	for _, f := range []struct{ name, v string }{{"RPCAddr", m.RPCAddr}, {"RaftAddr", m.RaftAddr}} {
		if f.v == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(f.v); err != nil || port == "" {
			return &MetaError{Field: f.name, Value: f.v, Err: ErrInvalidMeta, Reason: "must be host:port"}
		}
	}
	// Encode refuses what it cannot carry: negative numbers, a Meta over
	// MaxMetaSize.
	_, err := m.Encode()
	return err
}

// roleByte is m.Role's byte in the encoding.
func (m Meta) roleByte() (byte, error) {
	if i := slices.Index(roleBytes[:], m.Role); i > 0 {
		return byte(i), nil
	}
	return 0, &MetaError{Field: "Role", Value: string(m.Role), Err: ErrInvalidMeta, Reason: `must be "gate" or "manager"`}
}

// Encode returns the compact encoding of m, or an error wrapping
// ErrMetaTooLarge or ErrInvalidMeta.
func (m Meta) Encode() ([]byte, error) {
	role, err := m.roleByte()
	if err != nil {
		return nil, err
	}
	if m.Version < 0 {
		return nil, &MetaError{Field: "Version", Value: strconv.Itoa(m.Version), Err: ErrInvalidMeta, Reason: "must be >= 0"}
	}
	if m.Bootstrap.Expect < 0 {
		return nil, &MetaError{Field: "Bootstrap.Expect", Value: strconv.Itoa(m.Bootstrap.Expect), Err: ErrInvalidMeta, Reason: "must be >= 0"}
	}
	var flags byte
	if m.HasRaftState {
		flags |= flagHasRaftState
	}
	if m.Leaving {
		flags |= flagLeaving
	}
	if m.Bootstrap.Vote != 0 {
		flags |= flagVote
	}
	b := make([]byte, 0, 64+len(m.Datacenter)+len(m.NodeID)+len(m.RPCAddr)+len(m.RaftAddr)+len(m.Settings))
	b = append(b, metaFormat1, role, flags)
	b = binary.AppendUvarint(b, uint64(m.Version))
	b = binary.AppendUvarint(b, uint64(m.Bootstrap.Expect))
	if m.Bootstrap.Vote != 0 {
		b = binary.BigEndian.AppendUint64(b, m.Bootstrap.Vote)
	}
	for _, s := range []string{m.Datacenter, m.NodeID, m.RPCAddr, m.RaftAddr, m.Settings} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if len(b) > MaxMetaSize {
		return nil, &MetaError{Err: ErrMetaTooLarge, Reason: fmt.Sprintf("%d bytes, limit %d", len(b), MaxMetaSize)}
	}
	return b, nil
}

// DecodeMeta decodes what Encode produced. Errors wrap ErrMetaFormat (an
// encoding this version does not know) or ErrMetaCorrupt (truncated or
// malformed).
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, &MetaError{Err: ErrMetaCorrupt, Reason: "empty"}
	}
	if b[0] != metaFormat1 {
		return m, &MetaError{Field: "format", Value: strconv.Itoa(int(b[0])), Err: ErrMetaFormat, Reason: "unknown encoding"}
	}
	if len(b) < 3 {
		return m, &MetaError{Err: ErrMetaCorrupt, Reason: "truncated header"}
	}
	if int(b[1]) >= len(roleBytes) || roleBytes[b[1]] == "" {
		return m, &MetaError{Field: "Role", Value: strconv.Itoa(int(b[1])), Err: ErrMetaCorrupt, Reason: "unknown role"}
	}
	m.Role = roleBytes[b[1]]
	flags := b[2]
	m.HasRaftState = flags&flagHasRaftState != 0
	m.Leaving = flags&flagLeaving != 0
	b = b[3:]

	readUvarint := func(field string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, &MetaError{Field: field, Err: ErrMetaCorrupt, Reason: "bad varint"}
		}
		b = b[n:]
		return v, nil
	}
	readInt := func(field string) (int, error) {
		v, err := readUvarint(field)
		if err != nil {
			return 0, err
		}
		if v > uint64(maxInt32) {
			return 0, &MetaError{Field: field, Err: ErrMetaCorrupt, Reason: "out of range"}
		}
		return int(v), nil
	}
	readString := func(field string) (string, error) {
		n, err := readUvarint(field)
		if err != nil {
			return "", err
		}
		if n > uint64(len(b)) {
			return "", &MetaError{Field: field, Err: ErrMetaCorrupt, Reason: "truncated"}
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	var err error
	if m.Version, err = readInt("Version"); err != nil {
		return Meta{}, err
	}
	if m.Bootstrap.Expect, err = readInt("Bootstrap.Expect"); err != nil {
		return Meta{}, err
	}
	if flags&flagVote != 0 {
		if len(b) < 8 {
			return Meta{}, &MetaError{Field: "Bootstrap.Vote", Err: ErrMetaCorrupt, Reason: "truncated"}
		}
		m.Bootstrap.Vote = binary.BigEndian.Uint64(b)
		b = b[8:]
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"Datacenter", &m.Datacenter}, {"NodeID", &m.NodeID}, {"RPCAddr", &m.RPCAddr}, {"RaftAddr", &m.RaftAddr}} {
		if *f.dst, err = readString(f.name); err != nil {
			return Meta{}, err
		}
	}
	if len(b) > 0 { // revision 2: Settings
		if m.Settings, err = readString("Settings"); err != nil {
			return Meta{}, err
		}
	}
	// Trailing bytes are fields of a later revision of format 1.
	return m, nil
}

const (
	maxInt32         = 1<<31 - 1
	maxDatacenterLen = 128
)
