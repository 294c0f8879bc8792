package gate

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/tracing"
)

// Names of the gate's environment variables. Each has a flag derived from it
// (config.FlagName): GATE_LISTEN_ADDR is -gate-listen-addr. A flag wins over its
// variable. The seven IDEMPOTENCY_* variables are registered by
// config.RegisterIdempotency.
const (
	EnvListenAddr        = "GATE_LISTEN_ADDR"
	EnvDatacenter        = "GATE_DATACENTER"
	EnvNodeName          = "GATE_NODE_NAME"
	EnvManagers          = "GATE_MANAGERS"
	EnvTokenFile         = "GATE_TOKEN_FILE"
	EnvClusterSecretFile = "GATE_CLUSTER_SECRET_FILE"
	EnvOTLPEndpoint      = "GATE_OTLP_ENDPOINT"
	EnvTLSCertFile       = "GATE_TLS_CERT_FILE"
	EnvTLSKeyFile        = "GATE_TLS_KEY_FILE"
	EnvRPCTLSCAFile      = "GATE_RPC_TLS_CA_FILE"
	EnvRPCTLSCertFile    = "GATE_RPC_TLS_CERT_FILE"
	EnvRPCTLSKeyFile     = "GATE_RPC_TLS_KEY_FILE"
	EnvMaxBodyBytes      = "GATE_MAX_BODY_BYTES"
	EnvForwardTimeout    = "GATE_FORWARD_TIMEOUT_SECONDS"
	EnvShutdownTimeout   = "GATE_SHUTDOWN_TIMEOUT_SECONDS"
	EnvShutdownDelay     = "GATE_SHUTDOWN_DELAY_SECONDS"
	EnvLogLevel          = "GATE_LOG_LEVEL"
	EnvLogFormat         = "GATE_LOG_FORMAT"
	EnvPprof             = "GATE_PPROF"
	EnvInsecure          = "GATE_INSECURE"
	EnvJoin              = "GATE_JOIN"
	EnvGossipAddr        = "GATE_GOSSIP_ADDR"
	EnvGossipAdvertise   = "GATE_GOSSIP_ADVERTISE"
	EnvGossipKey         = "GATE_GOSSIP_KEY"
	EnvGossipProfile     = "GATE_GOSSIP_PROFILE"
	EnvMaxTTL            = config.EnvMaxTTL
	EnvFederationSettle  = "GATE_FEDERATION_SETTLE_SECONDS"
)

// Bounds of the gate's settings.
const (
	// MinBodyBytes and MaxBodyBytes bound GATE_MAX_BODY_BYTES. The upper bound
	// keeps a forwarded submission well under the RPC layer's 16 MiB limit.
	MinBodyBytes = 1 << 10
	MaxBodyBytes = 8 << 20
	// EnvCacheMaxBytes bounds the bytes of the gate's idempotency cache, and
	// DefaultCacheMaxBytes is its default (256 MiB).
	EnvCacheMaxBytes     = config.EnvCacheMaxBytes
	DefaultCacheMaxBytes = 256 << 20
	// DefaultMaxBodyBytes is the contract's default: 1 MiB for the whole body.
	DefaultMaxBodyBytes = 1 << 20
	// EnvMaxInFlightBodyBytes bounds the bytes of request bodies the gate
	// holds at once (inflight.go); DefaultMaxInFlightBodyBytes is its
	// default (256 MiB) and MaxMaxInFlightBodyBytes its upper bound, its
	// lower bound GATE_MAX_BODY_BYTES (Validate).
	EnvMaxInFlightBodyBytes     = "GATE_MAX_IN_FLIGHT_BODY_BYTES"
	DefaultMaxInFlightBodyBytes = 256 << 20
	MaxMaxInFlightBodyBytes     = 1 << 40
	// DefaultMaxTTL is the default of IDEMPOTENCY_MAX_TTL_SECONDS (30 days);
	// MaxMaxTTL bounds it (one year).
	DefaultMaxTTL = 30 * 24 * time.Hour
	// DefaultFederationSettle is GATE_FEDERATION_SETTLE_SECONDS' default.
	DefaultFederationSettle = time.Second
	MaxMaxTTL               = 365 * 24 * time.Hour
)

// Config is the gate's configuration. DefaultConfig returns the defaults;
// Register binds the operator-facing fields to flags and environment variables
// and declares the range of each, which both LoadConfig and Validate check
// (the manager's Config has the same shape). Adding a setting is a field, an
// Env constant, a default and one Register line.
// The fields below "Not settable" are for tests and embedders; zero values take
// the defaults noted.
type Config struct {
	ListenAddr string   // GATE_LISTEN_ADDR, default 127.0.0.1:8080
	Datacenter string   // GATE_DATACENTER, default dc1
	NodeName   string   // GATE_NODE_NAME, default the host name
	Managers   []string // GATE_MANAGERS, manager RPC addresses (host:port)
	TokenFile  string   // GATE_TOKEN_FILE, default none (every request is tenant "default")
	// OperatorTokenFile is GATE_OPERATOR_TOKEN_FILE: the operators' bearer
	// tokens, which alone read GET /v1/cluster; empty: none.
	OperatorTokenFile string
	// ClusterSecretFile is GATE_CLUSTER_SECRET_FILE: the secret the gate
	// presents to the managers' RPC (docs/security.md); empty: none.
	ClusterSecretFile string
	// OTLPEndpoint is GATE_OTLP_ENDPOINT: where OpenTelemetry traces go
	// (OTLP over HTTP, internal/tracing); empty: no tracing.
	OTLPEndpoint string
	// TLSCertFile and TLSKeyFile are GATE_TLS_CERT_FILE and GATE_TLS_KEY_FILE:
	// with both, the gate serves HTTPS and reloads the pair when the files
	// change (internal/certs); with neither, plain HTTP.
	TLSCertFile, TLSKeyFile string
	// RPCTLSCAFile, RPCTLSCertFile and RPCTLSKeyFile are GATE_RPC_TLS_*: the
	// cluster CA and the gate's client certificate for the managers' RPC
	// over mutual TLS (docs/security.md); all three or none.
	RPCTLSCAFile, RPCTLSCertFile, RPCTLSKeyFile string
	// Insecure is GATE_INSECURE: start without a cluster credential (no
	// GATE_RPC_TLS_*, no cluster secret), the managers' RPC and gossip
	// plaintext; without it a gate refuses to start so (CheckSecurity).
	Insecure        bool
	MaxBodyBytes    int64         // GATE_MAX_BODY_BYTES, default 1 MiB
	ForwardTimeout  time.Duration // GATE_FORWARD_TIMEOUT_SECONDS, default 10s
	ShutdownTimeout time.Duration // GATE_SHUTDOWN_TIMEOUT_SECONDS, default 30s
	ShutdownDelay   time.Duration // GATE_SHUTDOWN_DELAY_SECONDS, default 0: no delay
	LogLevel        string        // GATE_LOG_LEVEL: trace, debug, info, warn, error; default info
	LogFormat       string        // GATE_LOG_FORMAT: text or json; default text
	Pprof           bool          // GATE_PPROF: serve Go's /debug/pprof profiles on the API listener
	Join            []string      // GATE_JOIN: gossip seeds; empty = no membership (GATE_MANAGERS only)
	GossipAddr      string        // GATE_GOSSIP_ADDR: memberlist bind address, default 127.0.0.1:7300
	GossipAdvertise string        // GATE_GOSSIP_ADVERTISE: gossip address the others dial; empty = derived from GossipAddr
	GossipKey       string        // GATE_GOSSIP_KEY: base64 16/24/32-byte key; empty = plaintext
	GossipProfile   string        // GATE_GOSSIP_PROFILE: lan or local

	// Idempotency holds the seven IDEMPOTENCY_* settings.
	Idempotency config.Idempotency
	// MaxTTL (IDEMPOTENCY_MAX_TTL_SECONDS) is the longest Idempotency-TTL a
	// request may ask for; default 30 days.
	MaxTTL time.Duration
	// FederationSettle (GATE_FEDERATION_SETTLE_SECONDS) is how long the set
	// of datacenters the gate reads from its managers must stay the same
	// before the federation counts as formed (federation.go): until then a
	// datacenter the gate does not know is answered 503, not 400, and
	// /readyz waits for the first formation.
	FederationSettle time.Duration
	// CacheMaxBytes is IDEMPOTENCY_MAX_BYTES: the bound on the bytes of the
	// outcomes the idempotency cache holds (0: none); beyond it outcomes are
	// answered but not cached.
	CacheMaxBytes int64
	// MaxInFlightBodyBytes is GATE_MAX_IN_FLIGHT_BODY_BYTES: the bound on
	// the bytes of request bodies the gate holds at once (inflight.go);
	// beyond it requests are refused 503 unavailable. Default 256 MiB, at
	// least MaxBodyBytes.
	MaxInFlightBodyBytes int64

	// Not settable from the environment.

	// ReadyTimeout bounds the leader probe of GET /readyz (default 1s).
	ReadyTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout configure the HTTP server
	// (defaults 5s, 30s, 120s). The server's WriteTimeout is derived: the
	// longest a submission may take (the first federation view's wait + a
	// forward timeout + the pending wait) plus 10s; a worker's long poll
	// lengthens it by its wait.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	// RetryAfter is the Retry-After of 503 unavailable and 409
	// request_in_progress answers (default 1s; sent in whole seconds, at least 1).
	RetryAfter time.Duration
}

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		ListenAddr:        "127.0.0.1:8080",
		Datacenter:        "dc1",
		MaxBodyBytes:      DefaultMaxBodyBytes,
		ForwardTimeout:    10 * time.Second,
		ShutdownTimeout:   30 * time.Second,
		LogLevel:          "info",
		LogFormat:         logging.FormatText,
		GossipAddr:        "127.0.0.1:7300",
		GossipProfile:     membership.ProfileLAN,
		Idempotency:       config.DefaultIdempotency(),
		MaxTTL:            DefaultMaxTTL,
		FederationSettle:  DefaultFederationSettle,
		CacheMaxBytes:     DefaultCacheMaxBytes,
		ReadyTimeout:      time.Second,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		RetryAfter:        time.Second,

		MaxInFlightBodyBytes: DefaultMaxInFlightBodyBytes,
	}
}

// Register binds c's operator-facing fields to flags and environment variables
// on l, with their accepted ranges. The values c holds are the defaults (c
// starts at DefaultConfig()); Register does not change them.
func Register(l *config.Loader, c *Config) {
	l.String(&c.ListenAddr, EnvListenAddr, config.WantListenAddr,
		config.ListenAddr, "the address the HTTP API listens on")
	l.String(&c.Datacenter, EnvDatacenter, config.WantName,
		config.Name, "the gate's own datacenter: the default target of a job")
	l.String(&c.NodeName, EnvNodeName, "at most 128 visible ASCII characters (empty: the host name)",
		validateNodeName, "the gate's name in logs and metrics")
	l.List(&c.Managers, EnvManagers, "a comma-separated list of manager RPC addresses host:port",
		config.HostPort, "the datacenter's managers; the gate follows their leader")
	l.String(&c.TokenFile, EnvTokenFile, "a path to a file of '<token> <tenant>' lines (empty: no authentication)",
		nil, "the bearer tokens and the tenants they map to; reloaded when the file changes")
	l.String(&c.OperatorTokenFile, EnvOperatorTokenFile, "a path to a file of '<token> <operator>' lines (empty: none)",
		nil, "the operators' bearer tokens: the credential of GET /v1/cluster, the console's cluster view; reloaded with GATE_TOKEN_FILE")
	l.String(&c.TLSCertFile, EnvTLSCertFile, "a path to a PEM certificate (chain)", nil,
		"serve HTTPS with this certificate (with GATE_TLS_KEY_FILE); reloaded when the file changes")
	l.String(&c.TLSKeyFile, EnvTLSKeyFile, "a path to a PEM private key", nil,
		"the private key of GATE_TLS_CERT_FILE")
	l.String(&c.RPCTLSCAFile, EnvRPCTLSCAFile, "a path to a PEM certificate", nil,
		"the cluster CA: reach the managers' RPC over mutual TLS, accepting only managers it signed (with GATE_RPC_TLS_CERT_FILE and _KEY_FILE); reloaded when the file changes")
	l.String(&c.RPCTLSCertFile, EnvRPCTLSCertFile, "a path to a PEM certificate (chain)", nil,
		"the gate's client certificate for the managers' RPC, signed by the cluster CA")
	l.String(&c.RPCTLSKeyFile, EnvRPCTLSKeyFile, "a path to a PEM private key", nil,
		"the private key of GATE_RPC_TLS_CERT_FILE")
	l.String(&c.OTLPEndpoint, EnvOTLPEndpoint, "an http:// or https:// URL", tracing.CheckEndpoint,
		"send OpenTelemetry traces of submissions there (OTLP over HTTP, e.g. http://otel-collector:4318); empty: no tracing")
	l.String(&c.ClusterSecretFile, EnvClusterSecretFile, "a path to a file holding the cluster secret", nil,
		"the cluster secret (MANAGER_CLUSTER_SECRET_FILE's): the managers' RPC over mutual TLS with the CA derived from it (unless GATE_RPC_TLS_* is set), the gossip key derived from it (unless set), and presented to the managers")
	l.Bool(&c.Insecure, EnvInsecure,
		"start without a cluster credential: the managers' RPC and gossip unauthenticated and unencrypted (development only); refused together with a credential or a gossip key")
	l.Int64(&c.MaxBodyBytes, EnvMaxBodyBytes, MinBodyBytes, MaxBodyBytes,
		"the largest POST /v1/jobs body accepted (413 body_too_large beyond)")
	l.Int64(&c.MaxInFlightBodyBytes, EnvMaxInFlightBodyBytes, MinBodyBytes, MaxMaxInFlightBodyBytes,
		"the bytes of request bodies the gate holds at once, at least GATE_MAX_BODY_BYTES; a request whose body does not fit is refused 503 unavailable with Retry-After")
	l.Int64(&c.CacheMaxBytes, EnvCacheMaxBytes, 1<<20, 1<<40,
		"bytes of outcomes the idempotency cache holds; beyond it outcomes are answered but not cached")
	l.Seconds(&c.ForwardTimeout, EnvForwardTimeout, config.MinTTL, 600*time.Second,
		"how long a submission may spend reaching the manager leader before 503 unavailable (plus the pending wait)")
	l.Seconds(&c.ShutdownTimeout, EnvShutdownTimeout, config.MinTTL, time.Hour,
		"how long a graceful shutdown waits for requests in flight")
	l.Seconds(&c.ShutdownDelay, EnvShutdownDelay, 0, time.Hour,
		"how long a stopping gate keeps serving, /readyz answering 503, before its graceful shutdown: a load balancer's readiness checks take it out of rotation first")
	l.String(&c.LogLevel, EnvLogLevel, config.WantLogLevel,
		config.LogLevel, "the lowest level logged")
	l.String(&c.LogFormat, EnvLogFormat, config.WantLogFormat,
		config.LogFormat, "the log line format")
	l.Bool(&c.Pprof, EnvPprof, "serve Go's /debug/pprof profiles on the API listener (profiling only: do not expose)")
	l.List(&c.Join, EnvJoin, "a comma-separated list of gossip addresses host:port",
		config.HostPort, "gossip seeds: the gate learns the managers and their leader from the pool")
	l.String(&c.GossipAddr, EnvGossipAddr, config.WantHostPort, config.HostPort,
		"the gate's memberlist bind address (TCP and UDP), used when GATE_JOIN is set")
	l.String(&c.GossipAdvertise, EnvGossipAdvertise, config.WantAdvertise,
		config.Advertise, "the gossip address the others dial (NAT, containers), resolved at start")
	l.Secret(&c.GossipKey, EnvGossipKey, "base64 of a 16, 24 or 32-byte key", membership.CheckSecretKeys,
		"gossip encryption key, shared by every node of the pool; unset: derived from the cluster secret")
	l.String(&c.GossipProfile, EnvGossipProfile, "lan or local", config.OneOf(membership.ProfileLAN, membership.ProfileLocal),
		"memberlist timing profile")
	config.RegisterIdempotency(l, &c.Idempotency)
	l.Seconds(&c.FederationSettle, EnvFederationSettle, 0, time.Minute,
		"how long the set of datacenters read from the managers must stay the same before the federation counts as formed: until then an unknown datacenter is answered 503 (retry), not 400, and /readyz waits")
	l.Seconds(&c.MaxTTL, EnvMaxTTL, time.Second, MaxMaxTTL,
		"the longest Idempotency-TTL a submission may ask for (400 invalid_request beyond)")
}

// loader is a config.Loader of the gate's settings bound to c (Register),
// printing its help to usage.
func loader(c *Config, usage io.Writer) *config.Loader {
	l := config.NewLoader("gate", usage)
	Register(l, c)
	return l
}

// LoadConfig parses args (flags) and then the environment (lookup, for every
// flag not given) into a validated Config. -h prints the settings to usage
// and returns config.ErrHelp. Errors are *config.Error values naming the
// variable and its flag; they match config.ErrInvalid.
func LoadConfig(args []string, lookup func(string) (string, bool), usage io.Writer) (Config, error) {
	c := DefaultConfig()
	if err := loader(&c, usage).Parse(args, lookup); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// UnknownVariables returns the GATE_* and IDEMPOTENCY_* variables of environ
// that neither daemon reads (config.Loader.Unknown): Main logs a warning for
// each, with the setting it probably misspells.
func UnknownVariables(environ []string) []config.Unknown {
	c := DefaultConfig()
	return loader(&c, io.Discard).Unknown(environ, []string{"GATE_", "IDEMPOTENCY_"}, config.IdempotencyVariables)
}

// CheckSecurity applies config.CheckSecurity to the gate's settings: a gate
// starts with GATE_RPC_TLS_* or GATE_CLUSTER_SECRET_FILE, or with
// GATE_INSECURE=true alone.
func (c *Config) CheckSecurity() (config.Mode, error) {
	gossip := []config.GossipPool{{EnvKey: EnvGossipKey, Key: c.GossipKey, Unjoined: len(c.Join) == 0}}
	return config.CheckSecurity(config.Security{EnvInsecure: EnvInsecure, Insecure: c.Insecure, TLS: c.rpcTLSFiles(),
		EnvSecret: EnvClusterSecretFile, SecretFile: c.ClusterSecretFile, Gossip: gossip})
}

func (c *Config) rpcTLSFiles() config.TLSFiles {
	return config.TLSFiles{EnvCA: EnvRPCTLSCAFile, CA: c.RPCTLSCAFile, EnvCert: EnvRPCTLSCertFile, Cert: c.RPCTLSCertFile,
		EnvKey: EnvRPCTLSKeyFile, Key: c.RPCTLSKeyFile}
}

// Validate checks c as LoadConfig and New do: every setting against the range
// or form Register declares for it, then the rules that span several settings.
// Errors are *config.Error values naming the variable, its flag and the
// accepted range; they match config.ErrInvalid and the cause
// (config.ErrSyntax, config.ErrOutOfRange).
func (c *Config) Validate() error {
	if err := loader(c, io.Discard).Check(); err != nil {
		return err
	}
	if err := c.rpcTLSFiles().Check(); err != nil {
		return err
	}
	if c.MaxInFlightBodyBytes < c.MaxBodyBytes {
		return config.Invalid(EnvMaxInFlightBodyBytes, strconv.FormatInt(c.MaxInFlightBodyBytes, 10),
			fmt.Sprintf("an integer from %s (%d) to %d", EnvMaxBodyBytes, c.MaxBodyBytes, int64(MaxMaxInFlightBodyBytes)), config.ErrOutOfRange)
	}
	// The gossip address binds only with GATE_JOIN; on the API's port it
	// would fail to bind at start, as if another process held the port.
	if len(c.Join) > 0 && config.SamePort(c.ListenAddr, c.GossipAddr) {
		return config.Invalid(EnvGossipAddr, c.GossipAddr, "a port other than "+EnvListenAddr+"'s ("+c.ListenAddr+")", config.ErrOutOfRange)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		missing, other := EnvTLSKeyFile, EnvTLSCertFile
		if c.TLSCertFile == "" {
			missing, other = EnvTLSCertFile, EnvTLSKeyFile
		}
		return config.Invalid(missing, "", "set together with "+other, config.ErrSyntax)
	}
	return nil
}

// withDefaults fills the zero values of the fields that are not settable from
// the environment.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	for _, f := range []struct{ value, def *time.Duration }{
		{&c.ReadyTimeout, &d.ReadyTimeout},
		{&c.ReadHeaderTimeout, &d.ReadHeaderTimeout},
		{&c.ReadTimeout, &d.ReadTimeout},
		{&c.IdleTimeout, &d.IdleTimeout},
		{&c.RetryAfter, &d.RetryAfter},
	} {
		if *f.value <= 0 {
			*f.value = *f.def
		}
	}
	return c
}

// pendingWait is how long a duplicate waits on a PENDING entry: the configured
// timeout when waiting is enabled, else 0.
func (c *Config) pendingWait() time.Duration {
	if !c.Idempotency.WaitForPending {
		return 0
	}
	return c.Idempotency.PendingWaitTimeout
}

// writeTimeout is the HTTP server's WriteTimeout. The longest a submission
// takes is an omitted datacenters list at a gate that has read no federation
// view yet: the wait for the first view (at most ForwardTimeout,
// awaitFederationView), then a forward: ForwardTimeout plus the pending wait
// the manager is allowed (a duplicate waiting on the gate's own PENDING entry
// takes at most the view's wait and the pending wait). 10s of slack covers
// reading the body and writing the answer.
func (c *Config) writeTimeout() time.Duration {
	return 2*c.ForwardTimeout + c.pendingWait() + 10*time.Second
}

func validateNodeName(s string) error {
	if len(s) > 128 {
		return fmt.Errorf("length %d is over 128", len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return fmt.Errorf("byte 0x%02X at offset %d is not visible ASCII", s[i], i)
		}
	}
	return nil
}
