package ctl

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// ErrNoManagerLeader: cluster status or raft peers reached managers, but
// none of them knows a leader of its datacenter.
var ErrNoManagerLeader = errors.New("no manager that answered knows a leader")

// managerClient is the managers' client (rpc.Client, the gates' own) with
// oncectl's credentials, over the managers resolver names (of --managers);
// a call makes at most two attempts per manager given, "not leader" hints
// followed, each bounded by --timeout.
func (g *globals) managerClient(resolver rpc.Resolver) (*rpc.Client, error) {
	if len(g.managers) == 0 {
		return nil, usagef("--managers: no manager address")
	}
	files := config.TLSFiles{EnvCA: "--cacert", CA: g.cacert, EnvCert: "--cert", Cert: g.cert, EnvKey: "--key", Key: g.key}
	// The managers' rule (config.CheckSecurity): a credential, or --insecure
	// alone.
	if _, err := config.CheckSecurity(config.Security{EnvInsecure: "--insecure", Insecure: g.insecure, TLS: files,
		EnvSecret: "--cluster-secret-file", SecretFile: g.secret,
		EnvOperatorSecret: "--operator-secret-file", OperatorSecretFile: g.operatorSecret}); err != nil {
		var ce *config.Error
		if errors.As(err, &ce) { // named by flags, not variables: say it without a derived flag name
			return nil, usagef("%s: want %s", ce.Env, ce.Want)
		}
		return nil, usagef("%v", err)
	}
	secret, err := readSecret("--cluster-secret-file", g.secret)
	if err != nil {
		return nil, err
	}
	opSecret, err := readSecret("--operator-secret-file", g.operatorSecret)
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	switch {
	case files.Set():
		c, err := certs.NewCluster(g.cacert, g.cert, g.key, nil)
		if err != nil {
			return nil, usagef("--cacert, --cert, --key: %v", err)
		}
		tlsCfg = c.ClientConfig()
	case secret != "":
		// The CA derived from the secret verifies the managers; oncectl,
		// holding the secret, presents a leaf of the managers' role. It is
		// no operator credential (a leaf of the derived CA never is, whatever
		// its role): the Operator service takes --operator-secret-file.
		c, err := certs.ClusterFromSecret(secret, certs.RoleManager)
		if err != nil {
			return nil, usagef("--cluster-secret-file: %v", err)
		}
		tlsCfg = c.ClientConfig()
	}
	for _, a := range g.managers {
		if err := checkManagerAddr(a); err != nil {
			return nil, usagef("--managers: manager address %q: %v", a, err)
		}
	}
	return rpc.NewClient(rpc.ClientConfig{
		Resolver: resolver, TLS: tlsCfg,
		Secret: secret, OperatorSecret: opSecret,
		AttemptTimeout: cmp.Or(g.attempt, g.timeout), MaxAttempts: 2 * len(g.managers),
	}), nil
}

// checkManagerAddr checks that a is host:port, the port a number: an
// address without a port would otherwise only fail at the dial, as "no
// manager answered".
func checkManagerAddr(a string) error {
	if _, err := url.Parse("http://" + a); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if host == "" {
		return errors.New("want host:port: no host")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("want host:port: port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// readSecret reads the secret file a flag names ("" for none).
func readSecret(flag, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	s, err := config.ReadSecretFile(flag, file)
	if err != nil {
		return "", usagef("%v", err)
	}
	return s, nil
}

// withManagers runs do with a client of --managers and the command's
// context.
func (g *globals) withManagers(cmd *cobra.Command, do func(context.Context, *rpc.Client) error) error {
	return g.withManagersOf(cmd, rpc.StaticResolver(g.managers), do)
}

// withOneDatacenter runs do, a change the leader makes, once oneDatacenter
// has found --managers of one datacenter; do's calls go only to the
// managers that answered that check.
func (g *globals) withOneDatacenter(cmd *cobra.Command, do func(context.Context, *rpc.Client) error) error {
	managers := g.managers
	// The check asks each manager by its address, not through the
	// resolver: managers is narrowed before do's first call reads it.
	resolver := rpc.ResolverFunc(func() []string { return managers })
	return g.withManagersOf(cmd, resolver, func(ctx context.Context, mc *rpc.Client) error {
		answered, err := g.oneDatacenter(ctx, mc)
		if err != nil {
			return err
		}
		managers = answered
		return do(ctx, mc)
	})
}

// withManagersOf runs do with a client of the managers resolver names and
// the command's context.
func (g *globals) withManagersOf(cmd *cobra.Command, resolver rpc.Resolver, do func(context.Context, *rpc.Client) error) error {
	mc, err := g.managerClient(resolver)
	if err != nil {
		return err
	}
	defer mc.Close()
	ctx, cancel := g.context(cmd)
	defer cancel()
	return do(ctx, mc)
}

// statusAll asks every --managers entry for its status at once: asked in
// turn, one that never answers would take the whole --timeout, and every
// manager after it would be shown as failed. A row is the entry's status, or
// why it has none (rpc.Status is api.ManagerStatus).
func (g *globals) statusAll(ctx context.Context, mc *rpc.Client) []api.ClusterManager {
	rows := make([]api.ClusterManager, len(g.managers))
	var wg sync.WaitGroup
	for i, a := range g.managers {
		wg.Go(func() {
			rows[i].Addr = a
			st, err := mc.StatusOf(ctx, a)
			if err != nil {
				rows[i].Error = err.Error()
				return
			}
			rows[i].Status = st
		})
	}
	wg.Wait()
	return rows
}

// oneDatacenter refuses --managers entries that answer from more than one
// datacenter. A Raft change names a server ID, unique only within a
// datacenter, and goes to the first manager that answers: with managers of
// two datacenters given, it could change the other datacenter's group.
// Entries that do not answer within half the time left are not judged, and
// the change must not be sent to them: a manager that accepts calls and
// never answers (stuck) would otherwise take the whole --timeout, here or
// in the change's attempt. It returns the managers to send the change to:
// those that answered, or every entry when none did (or only one is given).
func (g *globals) oneDatacenter(ctx context.Context, mc *rpc.Client) ([]string, error) {
	if len(g.managers) < 2 {
		return g.managers, nil
	}
	check := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		check, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
		defer cancel()
	}
	byDC := map[string][]string{}
	var answered []string
	for _, r := range g.statusAll(check, mc) {
		if r.Status != nil {
			byDC[r.Status.Datacenter] = append(byDC[r.Status.Datacenter], r.Addr)
			answered = append(answered, r.Addr)
		}
	}
	if len(answered) == 0 {
		answered = g.managers
	}
	if len(byDC) < 2 {
		return answered, nil
	}
	var dcs []string
	for _, dc := range slices.Sorted(maps.Keys(byDC)) {
		dcs = append(dcs, fmt.Sprintf("%s (%s)", dc, strings.Join(byDC[dc], ",")))
	}
	return nil, usagef("--managers: the managers answer from %d datacenters, %s: a Raft change goes to one datacenter's group; give the managers of that datacenter only",
		len(byDC), strings.Join(dcs, ", "))
}

func clusterCmd(g *globals) *cobra.Command {
	cluster := &cobra.Command{Use: "cluster", Short: "Look at a datacenter's managers (status, members), or at the cluster through a gate (view)"}
	status := &cobra.Command{
		Use:   "status",
		Short: "Every manager's view: Raft state, leader, term, indexes, voters",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
				rows := g.statusAll(ctx, mc)
				failed, leader := 0, false
				for _, r := range rows {
					switch {
					case r.Status == nil:
						failed++
					case r.Status.LeaderID != "":
						leader = true
					}
				}
				if err := g.print(rows, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "MANAGER\tADDR\tDC\tSTATE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tVOTERS")
					for _, r := range rows {
						if r.Status == nil {
							fmt.Fprintf(w, "?\t%s\t\t(%s)\n", r.Addr, r.Error)
							continue
						}
						s := r.Status
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.NodeID, r.Addr, s.Datacenter, s.RaftState, s.LeaderID,
							s.Term, s.CommitIndex, s.AppliedIndex, strings.Join(s.Voters, ","))
					}
				}); err != nil {
					return err
				}
				if failed == len(rows) {
					return errors.New("no manager answered")
				}
				if !leader {
					return ErrNoManagerLeader
				}
				return nil
			})
		},
	}
	members := &cobra.Command{
		Use:   "members",
		Short: "The gossip pool's members (managers and gates) as a manager sees them",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
				m, err := mc.Members(ctx)
				if err != nil {
					return err
				}
				return g.print(m, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "NAME\tROLE\tDC\tSTATUS\tGOSSIP\tRPC\tRAFT")
					for _, x := range m.Members {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Name, x.Role, x.Datacenter, x.Status, x.Addr, dash(x.RpcAddr), dash(x.RaftAddr))
					}
				})
			})
		},
	}
	return withSubcommands(cluster, status, members, clusterViewCmd(g))
}

func raftCmd(g *globals) *cobra.Command {
	r := &cobra.Command{Use: "raft", Short: "Look at and change the Raft configuration"}
	peers := &cobra.Command{
		Use:   "peers",
		Short: "The Raft servers, with the leader's autopilot health",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The managers are asked in turn: a stuck one (it accepts the
			// call and never answers) takes a share of --timeout, not all of
			// it, and leaves the others time to answer.
			g.attempt = g.timeout / time.Duration(len(g.managers)+1)
			return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
				// The leader's status carries the autopilot's view of every server.
				// Without a leader, a manager's own status: its voters,
				// without health.
				st, err := mc.LeaderStatus(ctx)
				if err != nil {
					if st, err = mc.Status(ctx); err != nil {
						return err
					}
				}
				type peer struct {
					ID        string `json:"id"`
					Address   string `json:"address,omitempty"`
					RaftState string `json:"raft_state,omitempty"`
					Status    string `json:"status,omitempty"`
					Healthy   *bool  `json:"healthy,omitempty"`
				}
				// The Raft configuration's voters, with the autopilot's view of
				// each (the autopilot also tracks pool members that are no
				// longer in the configuration: those are not peers).
				health := map[string]rpc.ServerHealth{}
				if st.Autopilot != nil {
					for _, s := range st.Autopilot.Servers {
						health[s.ID] = s
					}
				}
				var ps []peer
				for _, v := range st.Voters {
					p := peer{ID: v, RaftState: "voter"}
					if h, ok := health[v]; ok {
						healthy := h.Healthy
						p.Address, p.RaftState, p.Status, p.Healthy = h.Address, h.RaftState, h.Status, &healthy
					}
					ps = append(ps, p)
				}
				refused := st.RefusedServers
				if refused == nil {
					refused = []rpc.RefusedServer{}
				}
				out := map[string]any{"leader": st.LeaderID, "term": st.Term, "peers": ps, "refused_servers": refused}
				if st.Autopilot != nil {
					out["failure_tolerance"] = st.Autopilot.FailureTolerance
				}
				err = g.print(out, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "ID\tADDRESS\tRAFT STATE\tGOSSIP\tHEALTHY")
					for _, p := range ps {
						h := "-"
						if p.Healthy != nil {
							h = fmt.Sprint(*p.Healthy)
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.ID, dash(p.Address), p.RaftState, dash(p.Status), h)
					}
					if len(st.RefusedServers) > 0 {
						// Gossip claims the leader refuses (docs/operations.md, "Identity").
						fmt.Fprintln(w, "\nREFUSED NODE\tCLAIMED ID\tRAFT ADDRESS\tREASON\tHOLDER")
						for _, r := range st.RefusedServers {
							fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Node, r.ID, dash(r.RaftAddr), r.Reason, dash(r.Holder))
						}
					}
				})
				if err == nil && st.LeaderID == "" {
					// The voters of a manager without a leader: printed, and
					// the exit code says the datacenter has none.
					err = ErrNoManagerLeader
				}
				return err
			})
		},
	}
	change := func(use, short string, do func(*rpc.Client, context.Context, string) (*rpcpb.PeerResult, error), args cobra.PositionalArgs) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: args,
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.withOneDatacenter(cmd, func(ctx context.Context, mc *rpc.Client) error {
					id := ""
					if len(args) > 0 {
						id = args[0]
					}
					res, err := do(mc, ctx, id)
					if err != nil {
						return err
					}
					return g.print(res, func(w *tabwriter.Writer) {
						fmt.Fprintf(w, "%s\tleader: %s\n", res.Done, dash(res.Leader))
					})
				})
			},
		}
	}
	return withSubcommands(r, peers,
		change("remove-peer ID", "Remove a dead manager from the Raft configuration (on the leader)", (*rpc.Client).RemovePeer, exactArgs(1, "one Raft server ID")),
		change("transfer-leader [ID]", "Hand leadership to ID, or to the most up-to-date voter", (*rpc.Client).TransferLeader, maxArgs(1, "one Raft server ID")))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func snapshotCmd(g *globals) *cobra.Command {
	snap := &cobra.Command{Use: "snapshot", Short: "Save and restore the datacenter's ledger (backups)"}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot archive of the leader's ledger to FILE",
		Args:  exactArgs(1, "the archive's file name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Where the archive goes is checked before the leader is asked
			// for it: a directory that does not exist, or FILE naming a
			// directory, would only fail once the archive was sent.
			if st, err := os.Stat(filepath.Dir(args[0])); err != nil {
				return usagef("%s: its directory: %v", args[0], err)
			} else if !st.IsDir() {
				return usagef("%s: not a directory", filepath.Dir(args[0]))
			}
			if st, err := os.Stat(args[0]); err == nil && st.IsDir() {
				return usagef("%s: a directory: want the archive's file name", args[0])
			}
			return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
				err := atomicfile.Write(args[0], func(w io.Writer) error { return mc.Snapshot(ctx, w) })
				if err != nil {
					return err
				}
				st, err := os.Stat(args[0])
				if err != nil {
					return err
				}
				return g.print(map[string]any{"file": args[0], "bytes": st.Size()}, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "saved %s (%d bytes)\n", args[0], st.Size())
				})
			})
		},
	}
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the datacenter's ledger with a snapshot archive (disaster recovery: later admissions are lost)",
		Args:  exactArgs(1, "the archive's file name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if st, err := os.Stat(args[0]); err != nil {
				return usagef("%v", err)
			} else if st.IsDir() {
				return usagef("%s: a directory: want a snapshot archive", args[0])
			}
			return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if err := mc.Restore(ctx, f); err != nil {
					return err
				}
				return g.print(map[string]any{"restored": args[0]}, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "restored %s\n", args[0])
				})
			})
		},
	}
	return withSubcommands(snap, save, restore)
}
