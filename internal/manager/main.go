package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
)

// Main runs a manager process until ctx ends: it loads the configuration
// (flags, then environ), starts Raft, membership and the RPC server, and shuts
// everything down in order. It returns the process exit code: 2 for a bad
// configuration, 1 for a failure to start, 0 after a clean shutdown.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cfg, err := LoadConfig(args, config.EnvList(environ), stderr)
	if errors.Is(err, config.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "manager: %v\n", err)
		return 2
	}
	level, _ := logging.ParseLevel(cfg.LogLevel)
	log := logging.New(stderr, cfg.LogFormat, level).With("role", "manager")
	if err := run(ctx, cfg, log); err != nil {
		log.Error("manager failed", "err", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, cfg Config, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := New(cfg, Deps{Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		m.Close()
		return fmt.Errorf("rpc listen %s: %w", cfg.RPCAddr, err)
	}
	// One listener, two protocols: the gates' submit stream (gRPC) and the
	// HTTP/1.1 reads, metrics and debug routes on srv.Mux() (see docs/rpc.md).
	srv := rpc.NewServer(m, rpc.ServerConfig{Logger: log.With(logging.KeyComponent, "rpc"), ErrorLog: logging.StdLogger(log, "rpc-http")})
	mux := srv.Mux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "once_manager_raft_log_batches_total",
			Help: "Raft log write batches (one fsync each) since start."}, func() float64 { return float64(m.logStore.batches.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_raft_last_index",
			Help: "Index of the last Raft log entry."}, func() float64 { return float64(m.raft.LastIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_raft_applied_index",
			Help: "Index of the last Raft log entry applied to the ledger."}, func() float64 { return float64(m.raft.AppliedIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_is_leader",
			Help: "1 while this manager is the serving leader."}, func() float64 {
			if m.checkLeader() == nil {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_ledger_entries",
			Help: "Entries in the idempotency ledger."}, func() float64 { return float64(m.fsm.Stats().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_jobs",
			Help: "Jobs in the job table."}, func() float64 { return float64(m.fsm.Stats().Jobs) }),
	)
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if cfg.Failpoints {
		mountFailpoints(mux, m)
		log.Warn("failpoints are enabled: /debug/failpoints can cut this manager's Raft links")
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("manager started", "node", cfg.NodeID, "dc", cfg.Datacenter, "rpc", cfg.RPCAddr, "raft", cfg.RaftAddr, "data", cfg.DataDir)

	cluster, err := startCluster(ctx, cfg, m, log)
	if err != nil {
		_ = srv.Close()
		m.Close()
		return err
	}

	select {
	case <-ctx.Done():
	case err = <-serveErr:
		log.Error("rpc server stopped", "err", err)
	}
	log.Info("manager stopping")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cluster.leave(shutdownCtx)
	_ = srv.Shutdown(shutdownCtx)
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

// mountFailpoints adds the fault-injection endpoints (MANAGER_FAILPOINTS only):
//
//	PUT /debug/failpoints/partition {"block": ["raft-addr", ...]} cuts Raft links
//	GET /debug/failpoints/partition shows them
func mountFailpoints(mux *http.ServeMux, m *Manager) {
	mux.HandleFunc("PUT /debug/failpoints/partition", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Block []string `json:"block"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil {
			http.Error(w, `{"error":"body must be {\"block\": [addresses]}"}`, http.StatusBadRequest)
			return
		}
		m.layer.Block(body.Block)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"block": m.layer.Blocked()})
	})
	mux.HandleFunc("GET /debug/failpoints/partition", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"block": m.layer.Blocked()})
	})
}
