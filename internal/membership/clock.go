package membership

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/clockwatch"
)

// Clock offsets ride on memberlist's probes, as Serf's network coordinates do:
// no extra traffic. A node answering a ping puts its wall clock in the ack
// (AckPayload); the prober, told the round trip (NotifyPingComplete), makes
// it a clockwatch.AckSample for its clockwatch.Estimator. Only direct probes
// carry payloads (memberlist drops them on indirect ones), which is what we
// want: an indirect round trip says little about one link.

// ackPayloadVersion is the first byte of the ack payload; the next 8 bytes are
// the responder's wall clock in unix nanoseconds, big-endian. A payload of
// another version or length is ignored (a node of a later version may send
// more).
const ackPayloadVersion = 1

// clockSampleMaxAge is how long a probe's clock sample counts. memberlist
// probes one member per probe interval, round robin, so in a pool of n members
// each is probed about every n intervals (a minute for 60 members on the LAN
// profile); a departed member's samples are dropped at once (ClockOffsets).
const clockSampleMaxAge = 10 * time.Minute

// PeerOffset is a member's clock offset as this node measures it.
type PeerOffset struct {
	Name   string // member name
	NodeID string // Meta.NodeID (the Raft server ID of a manager)
	Role   Role
	// Offset is the member's wall clock minus this node's (Config.Now).
	Offset time.Duration
	// RTT is the smallest round trip among the samples used: the offset is
	// exact within RTT/2.
	RTT time.Duration
	// Samples is how many recent probes the estimate rests on.
	Samples int
}

// pingDelegate is the Pool seen as memberlist's PingDelegate. memberlist calls
// it from its probe and packet goroutines; it takes only p.mu (briefly) and
// the estimator's own lock.
type pingDelegate Pool

// AckPayload implements memberlist.PingDelegate.
func (d *pingDelegate) AckPayload() []byte {
	b := make([]byte, 1, 9)
	b[0] = ackPayloadVersion
	return binary.BigEndian.AppendUint64(b, uint64((*Pool)(d).cfg.Now().UnixNano()))
}

// NotifyPingComplete implements memberlist.PingDelegate.
func (d *pingDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	p := (*Pool)(d)
	local := p.cfg.Now()
	if other == nil || other.Name == p.cfg.NodeName || len(payload) != 9 || payload[0] != ackPayloadVersion {
		return
	}
	remote := int64(binary.BigEndian.Uint64(payload[1:]))
	// Observe refuses a negative round trip.
	p.clocks.Observe(other.Name, clockwatch.AckSample(remote, local.UnixNano(), rtt, time.Now()))
}

// ClockOffsets returns the clock offsets of the alive members that have been
// probed recently, sorted by name. Members that left or failed are not listed
// (and their samples are dropped).
func (p *Pool) ClockOffsets() []PeerOffset {
	est := p.clocks.Peers(time.Now(), p.cfg.Now().UnixNano())
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PeerOffset, 0, len(est))
	for name, e := range est {
		m, ok := p.members[name]
		if !ok || m.State != StateAlive {
			p.clocks.Forget(name)
			continue
		}
		out = append(out, PeerOffset{Name: name, NodeID: m.Meta.NodeID, Role: m.Meta.Role,
			Offset: e.Offset, RTT: e.RTT, Samples: e.Samples})
	}
	slices.SortFunc(out, func(a, b PeerOffset) int { return strings.Compare(a.Name, b.Name) })
	return out
}
