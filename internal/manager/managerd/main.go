// Package managerd is the manager daemon: the process around a
// manager.Manager. It loads the configuration and the security mode, starts
// tracing, the Prometheus registry and the process's metrics, loads and
// watches the cluster TLS files, wires the operator credential and the
// Operator service, opens the manager's stores (before anything else writes
// in the data directory or joins a pool: the Raft log's lock refuses a second
// process there, and the directory's identity file a directory of another
// node or datacenter), joins the WAN pool (federation) and the datacenter's
// LAN pool (membership and the autopilot), runs the outbox, serves the RPC
// listener with its HTTP routes (metrics, pprof) and shuts everything down in
// order. cmd/manager is a thin main around Main.
package managerd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/telemetry"
	"github.com/once-dev/once/internal/tracing"
)

// Main runs a manager process until ctx ends: it loads the configuration
// (flags, then environ), starts Raft, membership and the RPC server, and shuts
// everything down in order. It returns the process exit code of
// internal/config: ExitConfig (2) for a bad configuration, ExitFailure (1) for
// a failure to start, ExitOK (0) after a clean shutdown or -h.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	return MainWith(ctx, args, environ, stdout, stderr, Options{})
}

// Options let another binary run the real manager with collaborators of its
// own (the fault-injection manager of the tests module does): zero values
// change nothing.
type Options struct {
	// WrapStreamLayer wraps the Raft stream layer
	// (manager.Deps.WrapStreamLayer).
	WrapStreamLayer func(raft.StreamLayer) raft.StreamLayer
	// Now is the manager's clock (manager.Deps.Now; default time.Now).
	Now func() time.Time
	// Mount, when set, adds handlers to the manager's RPC mux once the
	// manager is built, before the mux serves.
	Mount func(mux *http.ServeMux, m *manager.Manager)
	// Dial opens the manager's own RPC connections to other managers
	// (manager.Deps.Dial).
	Dial rpc.DialFunc
	// WrapWANTransport wraps the WAN gossip pool's network transport
	// (membership.Config.WrapTransport).
	WrapWANTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
}

// MainWith is Main with Options.
func MainWith(ctx context.Context, args, environ []string, stdout, stderr io.Writer, opts Options) int {
	cfg, err := manager.LoadConfig(args, config.EnvList(environ), stderr)
	if errors.Is(err, config.ErrHelp) {
		return config.ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return config.ExitConfig
	}
	mode, err := cfg.CheckSecurity()
	if err != nil {
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return config.ExitConfig
	}
	level, _ := logging.ParseLevel(cfg.LogLevel) // validated by LoadConfig
	log := logging.New(stderr, cfg.LogFormat, level).With(logging.KeyRole, "manager")
	if mode == config.ModeInsecure {
		log.Warn(manager.EnvInsecure + "=true: " + config.InsecureWarning)
	}
	for _, u := range manager.UnknownVariables(environ) {
		log.Warn("unknown variable ignored", logging.KeyVariable, u.Name, logging.KeyNearest, u.Nearest)
	}
	if err := run(ctx, cfg, log, opts); err != nil {
		log.Error("manager failed", logging.KeyError, err)
		if errors.Is(err, config.ErrInvalid) {
			return config.ExitConfig
		}
		return config.ExitFailure
	}
	log.Info("manager stopped")
	return config.ExitOK
}

// tlsReloadInterval is how often a manager looks at its cluster TLS files.
const tlsReloadInterval = 10 * time.Second

func run(ctx context.Context, cfg manager.Config, log *slog.Logger, opts Options) error {
	stopTracing, err := tracing.Start(ctx, cfg.OTLPEndpoint, "once-manager", cfg.NodeID, cfg.Datacenter)
	if err != nil {
		return err
	}
	defer tracing.Flush(stopTracing, log)
	if cfg.OTLPEndpoint != "" {
		log.Info("tracing on: spans go to the OTLP endpoint", logging.KeyAddr, cfg.OTLPEndpoint)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// raft's, memberlist's and autopilot's own metrics (go-metrics) on the
	// same registry, before any of them starts.
	stopTelemetry, err := telemetry.Export(reg, log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	var secret string
	if cfg.ClusterSecretFile != "" {
		if secret, err = config.ReadSecretFile(manager.EnvClusterSecretFile, cfg.ClusterSecretFile); err != nil {
			return err
		}
	}
	clusterTLS, err := manager.LoadClusterTLS(cfg, log)
	if err != nil {
		return err
	}
	// Operator certificates are accepted only from the files' CA, never from
	// the CA derived below from the secret (operatorAuth).
	fileTLS := clusterTLS != nil
	var serverTLS *tls.Config
	switch {
	case clusterTLS != nil:
		registerTLSReloadMetrics(reg, clusterTLS)
		wctx, stopWatch := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); clusterTLS.Watch(wctx, tlsReloadInterval) }()
		defer func() { stopWatch(); <-watched }()
	case secret != "":
		// Secret-only: mutual TLS all the same, with the CA every process
		// derives from the secret and a leaf of the manager's role.
		if clusterTLS, err = certs.ClusterFromSecret(secret, certs.RoleManager); err != nil {
			return config.Invalid(manager.EnvClusterSecretFile, cfg.ClusterSecretFile, "a cluster secret", err)
		}
	}
	if clusterTLS != nil {
		serverTLS = clusterTLS.ServerConfig()
	}
	opAuth, err := operatorAuth(cfg, secret, fileTLS, log)
	if err != nil {
		return err
	}
	lan := &lanView{}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	// The manager's stores open first: the Raft log's lock refuses a second
	// process on this data directory (walstore.ErrLocked) before it writes
	// there or joins a pool under this node's name. Under the lock, and
	// before the ledger and the stable store, the directory's identity file
	// refuses a directory of another node or datacenter (claimDataDir). The
	// federation starts after; Status reads its mismatches only once the
	// server serves.
	var fed *federation
	m, err := manager.New(cfg, manager.Deps{Logger: log, Registerer: reg, Now: now, WrapStreamLayer: opts.WrapStreamLayer,
		Clock: lan, Peers: lan, ClusterTLS: clusterTLS, ClusterSecret: secret, Dial: opts.Dial,
		ConfigMismatches: func() []rpc.ConfigMismatch { return fed.mismatches() },
		ClaimDataDir:     func() error { return claimDataDir(cfg, log) }})
	if err != nil {
		return err
	}
	fed, err = startFederation(ctx, cfg, secret, log, opts.WrapWANTransport)
	if err != nil {
		m.Close()
		return err
	}
	defer fed.stop()
	ln, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		m.Close()
		return fmt.Errorf("rpc listen %s: %w", cfg.RPCAddr, err)
	}
	// One listener, two protocols: the Manager and Operator services (gRPC)
	// and the HTTP/1.1 status, metrics and debug routes on srv.Mux() (see
	// docs/rpc.md).
	// The Operator service answers as soon as the listener does; its pool
	// reads wait for the join (unavailable until then).
	op := operator{m: m, node: cfg.NodeID, log: log.With(logging.KeyNode, cfg.NodeID), fed: fed, pilot: autopilotOf(m)}
	srv := rpc.NewServer(m, rpc.ServerConfig{Logger: log.With(logging.KeyComponent, "rpc"), ErrorLog: logging.ErrorLog(log, "rpc-http"), Secret: secret, TLS: serverTLS,
		Operator: op, OperatorAuth: opAuth})
	mux := srv.Mux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	registerMetrics(reg, m, fed.mismatches)
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv.SetFederation(fed.view)
	if opts.Mount != nil {
		opts.Mount(mux, m)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("manager started", logging.KeyNode, cfg.NodeID, logging.KeyDatacenter, cfg.Datacenter, logging.KeyRPCAddr, cfg.RPCAddr, logging.KeyRaftAddr, cfg.RaftAddr, logging.KeyDir, cfg.DataDir)

	cluster, err := startCluster(ctx, cfg, secret, now, m, lan, log)
	if err != nil {
		_ = srv.Close()
		m.Close()
		return err
	}
	fed.lan.Store(cluster.pool)
	// The outbox completes multi-datacenter submissions at the other
	// datacenters (docs/multidc.md); only a federated manager has any.
	obCtx, stopOutbox := context.WithCancel(ctx)
	obDone := make(chan struct{})
	if fed.wan != nil {
		go func() {
			defer close(obDone)
			m.RunOutbox(obCtx, fed.datacenters, log.With(logging.KeyComponent, "outbox"))
		}()
	} else {
		close(obDone)
	}

	select {
	case <-ctx.Done():
	case err = <-serveErr:
		log.Error("rpc server stopped", logging.KeyError, err)
	case <-m.Halted():
		err = m.FSM().Halted() // logged as the manager's failure: exit 1
	}
	log.Info("manager stopping")
	// The long polls answer now: one would hold srv.Shutdown below while
	// this manager, maybe the leader, serves no new call.
	m.EndLongPolls()
	stopOutbox()
	<-obDone
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cluster.leave(shutdownCtx)
	_ = srv.Shutdown(shutdownCtx)
	cluster.halt()
	cerr := m.Close()
	cluster.stop()
	if cerr != nil {
		return cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
