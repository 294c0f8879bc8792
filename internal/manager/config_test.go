package manager

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
)

// TestLoadConfigDefaults: with nothing given, LoadConfig returns
// DefaultConfig, which is valid and has its derived settings filled.
func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig(nil, config.MapLookup(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.NodeID != d.NodeID || c.RaftAddr != "127.0.0.1:7000" || c.RaftAdvertise != c.RaftAddr ||
		c.RPCAdvertise != c.RPCAddr || c.DataDir != "data/"+c.NodeID || c.Idempotency != config.DefaultIdempotency() {
		t.Fatalf("loaded %+v, defaults %+v", c, d)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// TestLoadConfigDerivedAndOperatorForms: derived settings follow what they
// derive from; seconds take decimals, durations take seconds, booleans take
// the usual spellings; a flag wins over its variable.
func TestLoadConfigDerivedAndOperatorForms(t *testing.T) {
	env := map[string]string{
		EnvNodeID:                    "m7",
		EnvRaftAddr:                  "10.0.0.7:7000",
		EnvApplyTimeout:              "2.5",
		EnvHeartbeatTimeout:          "0.5",
		EnvLeaveOnTerminate:          "Yes",
		config.EnvPendingTTL:         "0.5",
		config.EnvCommittedTTL:       "60.0",
		config.EnvWaitForPending:     "off",
		EnvDeadServerGrace:           "1.5",
		config.EnvPendingWaitTimeout: "30",
	}
	c, err := LoadConfig([]string{"-manager-rpc-addr", "10.0.0.7:7101"}, config.MapLookup(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "data/m7" || c.RaftAdvertise != "10.0.0.7:7000" || c.RPCAdvertise != "10.0.0.7:7101" {
		t.Fatalf("derived settings %q %q %q", c.DataDir, c.RaftAdvertise, c.RPCAdvertise)
	}
	if c.ApplyTimeout != 2500*time.Millisecond || c.HeartbeatTimeout != 500*time.Millisecond || !c.LeaveOnTerminate ||
		c.Idempotency.PendingTTL != 500*time.Millisecond || c.Idempotency.CommittedTTL != time.Minute ||
		c.Idempotency.WaitForPending || c.DeadServerGrace != 1500*time.Millisecond {
		t.Fatalf("loaded %+v", c)
	}
}

// TestLoadConfigErrors: every error names the variable and its flag and
// matches config.ErrInvalid and its cause.
func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		cause error
		want  []string
	}{
		{"node id", nil, map[string]string{EnvNodeID: "m/1"}, config.ErrSyntax, []string{EnvNodeID, "-manager-node-id", "A-Z a-z 0-9"}},
		{"raft addr", nil, map[string]string{EnvRaftAddr: "nohost"}, config.ErrSyntax, []string{EnvRaftAddr, "host:port"}},
		{"advertise unspecified", nil, map[string]string{EnvRaftAddr: "0.0.0.0:7000"}, config.ErrOutOfRange, []string{EnvRaftAdvertise, "routable"}},
		{"retention below committed ttl", nil, map[string]string{EnvJobRetention: "10"}, config.ErrOutOfRange, []string{EnvJobRetention, "IDEMPOTENCY_COMMITTED_TTL_SECONDS"}},
		{"lease above heartbeat", nil, map[string]string{EnvLeaderLeaseTimeout: "2s"}, config.ErrOutOfRange, []string{EnvLeaderLeaseTimeout, EnvHeartbeatTimeout}},
		// Raft refuses an election timeout below the heartbeat timeout
		// (raft.ValidateConfig): caught here, exit 2 naming the variable,
		// not at New with Raft's message and exit 1.
		{"election below heartbeat", nil, map[string]string{EnvElectionTimeout: "100ms"}, config.ErrOutOfRange, []string{EnvElectionTimeout, EnvHeartbeatTimeout, "500ms"}},
		{"election below heartbeat, flags", []string{"-manager-raft-heartbeat-timeout", "2s"}, nil, config.ErrOutOfRange, []string{EnvElectionTimeout, "-manager-raft-election-timeout", "2s"}},
		{"apply timeout", []string{"-manager-apply-timeout", "2 minutes"}, nil, config.ErrSyntax, []string{EnvApplyTimeout, "-manager-apply-timeout"}},
		{"bootstrap expect", nil, map[string]string{EnvBootstrapExpect: "10"}, config.ErrOutOfRange, []string{EnvBootstrapExpect, "from 1 to 9"}},
		{"log level", nil, map[string]string{EnvLogLevel: "loud"}, config.ErrSyntax, []string{EnvLogLevel, "trace, debug"}},
		{"bool", nil, map[string]string{EnvPprof: "sometimes"}, config.ErrSyntax, []string{EnvPprof, "true or false"}},
		{"batch items", nil, map[string]string{EnvBatchMaxItems: "0"}, config.ErrOutOfRange, []string{EnvBatchMaxItems, "-manager-batch-max-items"}},
		{"batch bytes", []string{"-manager-batch-max-bytes", "100"}, nil, config.ErrOutOfRange, []string{EnvBatchMaxBytes, "-manager-batch-max-bytes"}},
		{"job attempts", nil, map[string]string{EnvJobMaxAttempts: "0"}, config.ErrOutOfRange, []string{EnvJobMaxAttempts}},
		{"backoff max below min", nil, map[string]string{EnvJobBackoffMin: "10s", EnvJobBackoffMax: "1s"}, config.ErrOutOfRange, []string{EnvJobBackoffMax, EnvJobBackoffMin}},
		{"lease max below min", nil, map[string]string{EnvJobLeaseMin: "10s", EnvJobLeaseMax: "1s"}, config.ErrOutOfRange, []string{EnvJobLeaseMax, EnvJobLeaseMin}},
		// A type that no job can have (api.md: 1-128 of A-Z a-z 0-9 . _ -)
		// would have every job of it rejected 422 in silence.
		{"allowed job type not a type", nil, map[string]string{EnvAllowedJobTypes: "demo,send invoice"}, config.ErrSyntax, []string{EnvAllowedJobTypes, `"send invoice"`, "A-Z a-z 0-9 . _ -"}},
		{"allowed job type too long", nil, map[string]string{EnvAllowedJobTypes: strings.Repeat("t", 129)}, config.ErrSyntax, []string{EnvAllowedJobTypes, "1 to 128"}},
		// Two of the manager's listeners on one port: refused naming both
		// variables, not "address already in use" at start (exit 1), which
		// sends the operator looking for another process.
		{"rpc addr is raft addr", nil, map[string]string{EnvRPCAddr: "127.0.0.1:7000"}, config.ErrOutOfRange, []string{EnvRPCAddr, EnvRaftAddr, "127.0.0.1:7000"}},
		{"gossip on every interface at raft's port", nil, map[string]string{EnvGossipAddr: ":7000"}, config.ErrOutOfRange, []string{EnvGossipAddr, EnvRaftAddr}},
		{"wan gossip addr is gossip addr", nil, map[string]string{EnvWANGossipAddr: "127.0.0.1:7200"}, config.ErrOutOfRange, []string{EnvWANGossipAddr, EnvGossipAddr}},
		{"lease default out of bounds", nil, map[string]string{EnvJobLeaseDefault: "2h"}, config.ErrOutOfRange, []string{EnvJobLeaseDefault, "MANAGER_JOB_LEASE_MIN..MAX"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(tt.args, config.MapLookup(tt.env), io.Discard)
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) || !errors.Is(err, tt.cause) {
				t.Fatalf("got %v, want a *config.Error matching ErrInvalid and %v", err, tt.cause)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not name %q", err, w)
				}
			}
		})
	}
}

// TestValidateBuiltInCode: Validate checks a Config built in code as
// LoadConfig checks one read from flags.
func TestValidateBuiltInCode(t *testing.T) {
	c := DefaultConfig()
	c.Datacenter = "dc 1"
	if err := c.Validate(); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), EnvDatacenter) {
		t.Fatalf("got %v", err)
	}
	c = DefaultConfig()
	c.LogFormat = "xml"
	if err := c.Validate(); !errors.Is(err, config.ErrSyntax) || !strings.Contains(err.Error(), "-manager-log-format") {
		t.Fatalf("got %v", err)
	}
}

// TestValidateAsLoadConfig: a Config built in code with a value out of its
// range or form fails Validate with the same *config.Error as LoadConfig
// gives for that value in the environment.
func TestValidateAsLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		set        func(*Config)
	}{
		{EnvBootstrapExpect, "10", func(c *Config) { c.BootstrapExpect = 10 }},
		{EnvHeartbeatTimeout, "10ms", func(c *Config) { c.HeartbeatTimeout = 10 * time.Millisecond }},
		{EnvDeadServerGrace, "0.5", func(c *Config) { c.DeadServerGrace = 500 * time.Millisecond }},
		{config.EnvPendingTTL, "0.05", func(c *Config) { c.Idempotency.PendingTTL = 50 * time.Millisecond }},
		{EnvLedgerMaxBytes, "1024", func(c *Config) { c.LedgerMaxBytes = 1024 }},
		{EnvLedgerStore, "tape", func(c *Config) { c.LedgerStore = "tape" }},
		{EnvWANJoin, "nohost", func(c *Config) { c.WANJoin = []string{"nohost"} }},
		{EnvAllowedJobTypes, "demo;report", func(c *Config) { c.AllowedJobTypes = []string{"demo;report"} }},
	} {
		_, loaded := LoadConfig(nil, config.MapLookup(map[string]string{tc.env: tc.value}), io.Discard)
		c := DefaultConfig()
		tc.set(&c)
		err := c.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Env != tc.env || ce.Value != tc.value || !reflect.DeepEqual(err, loaded) {
			t.Errorf("%s: Validate() = %v, LoadConfig with %s=%s: %v; want the same *config.Error", tc.env, err, tc.env, tc.value, loaded)
		}
	}
}

// TestLoadConfigWAN: the WAN settings load from their variables; a WAN seed,
// advertise address or key without MANAGER_WAN_GOSSIP_ADDR is a configuration
// error naming the variable.
func TestLoadConfigWAN(t *testing.T) {
	c, err := LoadConfig(nil, config.MapLookup(map[string]string{
		EnvWANGossipAddr: "127.0.0.1:7300", EnvWANJoin: "127.0.0.1:7301,127.0.0.1:7302",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.WANGossipAddr != "127.0.0.1:7300" || len(c.WANJoin) != 2 {
		t.Fatalf("loaded %+v", c)
	}
	for _, env := range []map[string]string{
		{EnvWANJoin: "127.0.0.1:7301"},
		{EnvWANGossipAddr: "nonsense"},
	} {
		_, err := LoadConfig(nil, config.MapLookup(env), io.Discard)
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), EnvWANGossipAddr) {
			t.Fatalf("%v: err %v, want a configuration error naming %s", env, err, EnvWANGossipAddr)
		}
	}
}
