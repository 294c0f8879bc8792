package membership

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profiles select memberlist's timings.
const (
	// ProfileLAN is memberlist's DefaultLANConfig: production in one datacenter.
	ProfileLAN = "lan"
	// ProfileLocal is memberlist's DefaultLocalConfig: one host or a fast LAN.
	ProfileLocal = "local"
	// ProfileTest is much faster probes and gossip for tests on loopback.
	ProfileTest = "test"
	// ProfileWAN is memberlist's DefaultWANConfig: the pool of every
	// datacenter's managers (the federation), across wide-area links.
	ProfileWAN = "wan"
)

// DefaultGossipPort is the port used when BindPort is not set and for seeds
// given without a port.
const DefaultGossipPort = 7946

// Config of a pool. The zero value of every optional field takes the default
// noted.
type Config struct {
	// NodeName is the node's unique name in the pool (required).
	NodeName string
	// BindAddr is the address to listen on for gossip, UDP and TCP (default
	// 0.0.0.0).
	BindAddr string
	// BindPort is the gossip port; 0 picks a free port (tests). Use
	// DefaultGossipPort in production.
	BindPort int
	// AdvertiseAddr and AdvertisePort are what the others dial, when not the
	// bind address (NAT, containers). Empty/0: derived from the bind address.
	AdvertiseAddr string
	AdvertisePort int
	// Seeds are other members' gossip addresses (host or host:port). An empty
	// list, or one naming only this node, starts a new pool.
	Seeds []string
	// SecretKey enables gossip encryption (AES-GCM) when set: 16, 24 or 32
	// bytes (see ParseSecretKey). nil means plaintext. All members must share
	// a key.
	SecretKey []byte
	// ExtraKeys are further keys this node decrypts with but does not
	// encrypt with (for rolling key rotation; see ParseSecretKeys). They
	// require SecretKey.
	ExtraKeys [][]byte
	// Meta is what this node publishes (Role, Datacenter and NodeID required;
	// RaftAddr for managers).
	Meta Meta
	// Logger receives the pool's and memberlist's logs (nil discards them).
	// Give it the node's identity (e.g. logging.KeyNode) if the process's
	// logger does not already carry it.
	Logger *slog.Logger
	// Profile is ProfileLAN (default), ProfileLocal, ProfileTest or ProfileWAN.
	Profile string
	// BroadcastTimeout bounds how long UpdateMeta and Leave wait for their
	// message to be gossiped (default 5s).
	BroadcastTimeout time.Duration
	// DepartedRetention is how long a member that left or failed is kept in
	// Members (default 72h). A member that comes back replaces its record.
	DepartedRetention time.Duration
	// Now is this node's wall clock (default time.Now): what its acks tell
	// the others, and what it compares their clocks with (ClockOffsets). A
	// test gives a node a skewed clock here.
	Now func() time.Time
	// WAN makes this the federation's pool of managers of every datacenter
	// (as Consul's servers' WAN pool) rather than one datacenter's LAN pool:
	// its packets carry the label "once-wan" instead of "once-lan/<dc>", so
	// the two pools never mix even when their seeds point across. Node names
	// must be unique across datacenters (the manager uses WANNodeName).
	WAN bool
	// WrapTransport, when set, wraps the pool's network transport (the UDP
	// and TCP listener on BindAddr:BindPort that memberlist would otherwise
	// create itself): every packet and stream the pool sends goes through
	// the wrapper. nil: memberlist's own transport, as in the daemons. A
	// test seam: the tests module's fault layer cuts the WAN pool between
	// datacenters through it.
	WrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
	// Knobs are for tests only (TestingKnobs).
	Knobs TestingKnobs
}

// TestingKnobs are hooks for tests only (CockroachDB's TestingKnobs
// pattern: passed in Config, zero in production).
type TestingKnobs struct {
	// KeyringQuerySent, when set, is called by KeyringQuery once it has
	// started sending the query to every member it asks, before it waits
	// for their replies.
	KeyringQuerySent func()
	// KeyringReplyArrived, when set, is called with the answering node's
	// name each time a reply to a keyring query of this node arrives, after
	// the query has been given it.
	KeyringReplyArrived func(node string)
}

// GateNodeName is the name a gate gives its LAN pool: its name (GATE_NODE_NAME)
// followed by "/gate". A manager's name there is its node ID, which holds no
// "/", so a gate and a manager never share one, not even with the same
// default (the host name): memberlist would keep one of them out of the pool.
func GateNodeName(name string) string { return name + "/gate" }

// WANNodeName is the name a manager gives the WAN pool: <node-id>.<datacenter>,
// or <node-id>/<datacenter> when the datacenter's name holds a dot. Node IDs
// and datacenter names are of A-Z a-z 0-9 . _ - (config.Name), so a node ID
// may be a host name with dots; the slash keeps node "a.b" of datacenter "c"
// and node "a" of datacenter "b.c" apart, and every datacenter without a dot
// keeps its managers' names.
func WANNodeName(nodeID, datacenter string) string {
	if strings.Contains(datacenter, ".") {
		return nodeID + "/" + datacenter
	}
	return nodeID + "." + datacenter
}

// Validate checks c; the error is a *ConfigError that names the field.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return &ConfigError{Field: "NodeName", Reason: "required"}
	}
	if c.BindAddr != "" && net.ParseIP(c.BindAddr) == nil {
		return &ConfigError{Field: "BindAddr", Value: c.BindAddr, Reason: "must be an IP address"}
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return &ConfigError{Field: "BindPort", Value: strconv.Itoa(c.BindPort), Reason: "must be 0..65535"}
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return &ConfigError{Field: "AdvertiseAddr", Value: c.AdvertiseAddr, Reason: "must be an IP address"}
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return &ConfigError{Field: "AdvertisePort", Value: strconv.Itoa(c.AdvertisePort), Reason: "must be 0..65535"}
	}
	for _, s := range c.Seeds {
		if _, _, err := splitSeed(s); err != nil {
			return &ConfigError{Field: "Seeds", Value: s, Reason: "must be host or host:port", Err: err}
		}
	}
	if c.SecretKey != nil {
		if err := validateKeyLen(len(c.SecretKey)); err != nil {
			return &ConfigError{Field: "SecretKey", Err: err}
		}
	}
	if len(c.ExtraKeys) > 0 && c.SecretKey == nil {
		return &ConfigError{Field: "ExtraKeys", Reason: "need SecretKey"}
	}
	for _, k := range c.ExtraKeys {
		if err := validateKeyLen(len(k)); err != nil {
			return &ConfigError{Field: "ExtraKeys", Err: err}
		}
	}
	switch c.Profile {
	case "", ProfileLAN, ProfileLocal, ProfileTest, ProfileWAN:
	default:
		return &ConfigError{Field: "Profile", Value: c.Profile, Reason: `must be "lan", "local", "test" or "wan"`}
	}
	if c.BroadcastTimeout < 0 {
		return &ConfigError{Field: "BroadcastTimeout", Value: c.BroadcastTimeout.String(), Reason: "must be >= 0"}
	}
	if c.DepartedRetention < 0 {
		return &ConfigError{Field: "DepartedRetention", Value: c.DepartedRetention.String(), Reason: "must be >= 0"}
	}
	if err := c.Meta.Validate(); err != nil {
		field := "Meta"
		if me, ok := err.(*MetaError); ok && me.Field != "" {
			field = "Meta." + me.Field
		}
		return &ConfigError{Field: field, Err: err}
	}
	return nil
}

// withDefaults returns c with every optional field that is not set given its
// default. Start runs it once; the pool then reads the fields as they are.
func (c Config) withDefaults() Config {
	c.BindAddr = cmp.Or(c.BindAddr, "0.0.0.0")
	c.Profile = cmp.Or(c.Profile, ProfileLAN)
	c.BroadcastTimeout = cmp.Or(c.BroadcastTimeout, 5*time.Second)
	c.DepartedRetention = cmp.Or(c.DepartedRetention, 72*time.Hour)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// ParseSecretKey decodes a base64 (standard encoding, as `openssl rand
// -base64 32` prints) gossip key of 16, 24 or 32 bytes (AES-128/192/256).
// Errors wrap ErrInvalidKey.
func ParseSecretKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %w", ErrInvalidKey, err)
	}
	if err := validateKeyLen(len(key)); err != nil {
		return nil, err
	}
	return key, nil
}

// ParseSecretKeys parses a comma-separated list of base64 keys, as
// MANAGER_GOSSIP_KEY and GATE_GOSSIP_KEY accept: the first is the primary
// key (Config.SecretKey, used to encrypt), the others only decrypt
// (Config.ExtraKeys). A single key is the common case. An empty string
// returns nil, nil, nil (no encryption); a string of white space alone is
// an error wrapping ErrInvalidKey, not "no key": a variable set to a blank
// value (a template's empty substitution) must not turn encryption off
// (nor stand in the way of the key derived from the cluster secret).
func ParseSecretKeys(s string) (primary []byte, extra [][]byte, err error) {
	if s == "" {
		return nil, nil, nil
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil, fmt.Errorf("%w: only white space (leave it empty for no key)", ErrInvalidKey)
	}
	for i, part := range strings.Split(s, ",") {
		k, err := ParseSecretKey(part)
		if err != nil {
			return nil, nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		if i == 0 {
			primary = k
		} else {
			extra = append(extra, k)
		}
	}
	return primary, extra, nil
}

// CheckSecretKeys checks a list of keys as ParseSecretKeys reads it: the
// validator of MANAGER_GOSSIP_KEY, MANAGER_WAN_GOSSIP_KEY and
// GATE_GOSSIP_KEY, so that a bad key stops a daemon at start, before it
// listens.
func CheckSecretKeys(s string) error {
	_, _, err := ParseSecretKeys(s)
	return err
}

func validateKeyLen(n int) error {
	switch n {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: %d bytes, must be 16, 24 or 32", ErrInvalidKey, n)
}

// ResolveAdvertise turns an advertised gossip address, "host:port" with a host
// name or an IP, into the IP and port memberlist publishes (its AdvertiseAddr
// must be an IP). A name is resolved once, now: in a container, the
// container's own service name gives its address on the project network. An
// unspecified address (0.0.0.0, ::) is refused: nobody can dial it.
func ResolveAdvertise(addr string) (ip string, port int, err error) {
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return "", 0, err
	}
	if a.IP == nil || a.IP.IsUnspecified() {
		return "", 0, fmt.Errorf("%s is not a routable address", addr)
	}
	if a.Port <= 0 {
		return "", 0, fmt.Errorf("%s: missing port", addr)
	}
	return a.IP.String(), a.Port, nil
}

// splitSeed parses "host" or "host:port".
func splitSeed(s string) (host string, port int, err error) {
	if s == "" {
		return "", 0, fmt.Errorf("empty seed")
	}
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		// No port: the whole thing is the host (IPv6 literals need brackets
		// with a port, and may stand alone without one).
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(s, "[]"), DefaultGossipPort, nil
		}
		return "", 0, err
	}
	if h == "" {
		return "", 0, fmt.Errorf("missing host")
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, n, nil
}

// memberlistConfig builds memberlist's config for the profile, from c with
// its defaults (withDefaults).
func (c *Config) memberlistConfig() *memberlist.Config {
	var mc *memberlist.Config
	switch c.Profile {
	case ProfileLocal:
		mc = memberlist.DefaultLocalConfig()
	case ProfileTest:
		mc = memberlist.DefaultLocalConfig()
		// Fast, yet tolerant of a loaded CI machine under -race: a missed
		// probe makes a node suspect, and it has SuspicionMult probe
		// intervals (scaled up when alone) to refute before it is dead.
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 150 * time.Millisecond
		mc.GossipInterval = 30 * time.Millisecond
		mc.PushPullInterval = time.Second
		mc.GossipToTheDeadTime = 3 * time.Second
		mc.DeadNodeReclaimTime = 500 * time.Millisecond
		mc.TCPTimeout = 2 * time.Second
		mc.SuspicionMult = 3
		mc.RetransmitMult = 3
	case ProfileWAN:
		mc = memberlist.DefaultWANConfig()
	default:
		mc = memberlist.DefaultLANConfig()
	}
	// Let a manager that crashed come back under its name on a new address
	// once it has been dead this long (memberlist refuses the address change
	// of a dead node otherwise until it is reaped).
	mc.DeadNodeReclaimTime = cmp.Or(mc.DeadNodeReclaimTime, mc.GossipToTheDeadTime)
	mc.Name = c.NodeName
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = cmp.Or(c.AdvertisePort, c.BindPort)
	// The label keeps two datacenters' LAN pools apart even if a seed list
	// points across: memberlist drops packets whose label differs.
	mc.Label = "once-lan/" + c.Meta.Datacenter
	if c.WAN {
		mc.Label = "once-wan"
	}
	return mc
}

// reconnectInterval is how often the pool tries to join a failed member.
func (c *Config) reconnectInterval() time.Duration {
	switch c.Profile {
	case ProfileTest:
		return time.Second
	case ProfileLocal:
		return 5 * time.Second
	}
	return 30 * time.Second
}

// joinBackoff returns the first and the longest wait between join attempts.
func (c *Config) joinBackoff() (first, max time.Duration) {
	if c.Profile == ProfileTest {
		return 50 * time.Millisecond, time.Second
	}
	return time.Second, 30 * time.Second
}
