package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/telemetry"
	"github.com/once-dev/once/internal/tracing"
)

// Exit codes of Main: internal/config's, shared by both daemons.
const (
	ExitOK     = config.ExitOK
	ExitFailed = config.ExitFailure // the gate could not listen or stopped on an error
	ExitConfig = config.ExitConfig  // a setting is invalid; the message names its variable and range
)

// Main is the gate command: it reads the configuration from args (flags) and
// environ (variables, for every flag not given), serves until ctx ends, and
// returns the process's exit code. Logs go to stderr; -h prints the settings to
// stderr. stdout is not written to.
func Main(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	return MainWith(ctx, args, environ, stdout, stderr, Options{})
}

// Options let another binary run the real gate with collaborators of its
// own (the tests module's fault-injection gate); cmd/gate passes none.
type Options struct {
	// Dial opens the gate's connections to managers (Deps.Dial).
	Dial rpc.DialFunc
}

// MainWith is Main with Options.
func MainWith(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer, opts Options) int {
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "gate: %v\n", err)
		return code
	}
	cfg, err := LoadConfig(args, config.EnvList(environ), stderr)
	if errors.Is(err, config.ErrHelp) {
		return ExitOK
	} else if err != nil {
		return fail(ExitConfig, err)
	}
	mode, err := cfg.CheckSecurity()
	if err != nil {
		return fail(ExitConfig, err)
	}
	logger, err := NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return fail(ExitConfig, err)
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
	logger = logger.With(logging.KeyRole, "gate", logging.KeyNode, cfg.NodeName)
	// One registry for the gate's own metrics and memberlist's, exported
	// through go-metrics' Prometheus sink before the pool starts.
	deps := Deps{Logger: logger, Registry: prometheus.NewRegistry(), Dial: opts.Dial}
	if mode == config.ModeInsecure {
		logger.Warn(EnvInsecure + "=true: " + config.InsecureWarning)
	}
	if cfg.TokenFile == "" {
		logger.Warn(noTokenFileWarning, logging.KeyVariable, EnvTokenFile)
	}
	for _, u := range UnknownVariables(environ) {
		logger.Warn("unknown variable ignored", logging.KeyVariable, u.Name, logging.KeyNearest, u.Nearest)
	}
	if cfg.ClusterSecretFile != "" {
		if deps.ClusterSecret, err = config.ReadSecretFile(EnvClusterSecretFile, cfg.ClusterSecretFile); err != nil {
			return fail(ExitConfig, err)
		}
	}
	stopTracing, err := tracing.Start(ctx, cfg.OTLPEndpoint, "once-gate", cfg.NodeName, cfg.Datacenter)
	if err != nil {
		return fail(ExitConfig, err)
	}
	defer tracing.Flush(stopTracing, logger)
	if cfg.OTLPEndpoint != "" {
		logger.Info("tracing on: spans go to the OTLP endpoint", logging.KeyAddr, cfg.OTLPEndpoint)
	}
	stopTelemetry, err := telemetry.Export(deps.Registry, logger)
	if err != nil {
		return fail(ExitFailed, err)
	}
	defer stopTelemetry()
	if len(cfg.Join) > 0 {
		pool, err := startMembership(ctx, cfg, deps.ClusterSecret, logger)
		if err != nil {
			return fail(ExitFailed, err)
		}
		defer func() {
			if err := pool.Leave(2 * time.Second); err != nil {
				logger.Warn("leaving the gossip pool", logging.KeyError, err)
			}
			_ = pool.Shutdown()
		}()
		deps.Resolver = poolResolver(pool, cfg.Datacenter, cfg.Managers)
		deps.Gates = poolGates(pool)
	}
	if deps.Resolver == nil {
		deps.Resolver = rpc.StaticResolver(append([]string(nil), cfg.Managers...))
	}
	// The federation (other datacenters' managers) is read from the local
	// managers and refreshed while the gate runs.
	if deps.ClusterTLS, err = clusterTLSFor(cfg, deps.ClusterSecret, logger); err != nil {
		return fail(ExitConfig, err)
	}
	var fedTLS *tls.Config
	if deps.ClusterTLS != nil {
		fedTLS = deps.ClusterTLS.ClientConfig()
	}
	fed := newFederationPoller(deps.Resolver, deps.ClusterSecret, fedTLS, logger.With(logging.KeyComponent, "federation"))
	fed.settle = cfg.FederationSettle
	deps.Federation = fed
	fedCtx, stopFed := context.WithCancel(ctx)
	fedDone := make(chan struct{})
	go func() { defer close(fedDone); fed.run(fedCtx) }()
	defer func() { stopFed(); <-fedDone }()
	g, err := New(cfg, deps)
	if errors.Is(err, config.ErrInvalid) {
		return fail(ExitConfig, err)
	} else if err != nil {
		return fail(ExitFailed, err)
	}
	defer g.Close()
	if len(cfg.Managers) == 0 && len(cfg.Join) == 0 {
		logger.Warn("no manager addresses (" + EnvManagers + ") and no gossip seeds (" + EnvJoin + "): every submission will be answered 503 until managers are known")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.ListenAddr)
	if err != nil {
		logger.Error("listen failed", logging.KeyAddr, cfg.ListenAddr, logging.KeyError, err)
		fmt.Fprintf(stderr, "gate: listen on %s (%s): %v\n", cfg.ListenAddr, EnvListenAddr, err)
		return ExitFailed
	}
	if err := g.Serve(ctx, ln); err != nil {
		logger.Error("gate stopped on an error", logging.KeyError, err)
		return ExitFailed
	}
	return ExitOK
}

// noTokenFileWarning is logged at start by a gate without GATE_TOKEN_FILE:
// its API then authenticates no one (docs/security.md).
const noTokenFileWarning = "no token file (" + EnvTokenFile + "): the API authenticates no one, and every caller acts as tenant \"default\""

// NewLogger returns the gate's logger: internal/logging's handler writing to w
// at level (trace, debug, info, warn, error) in format (text or json). Errors
// name the variable, like every configuration error.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := logging.ParseLevel(level)
	if err != nil {
		return nil, config.Invalid(EnvLogLevel, level, config.WantLogLevel, err)
	}
	if err := config.LogFormat(format); err != nil {
		return nil, config.Invalid(EnvLogFormat, format, config.WantLogFormat, err)
	}
	return logging.New(w, format, lv), nil
}
