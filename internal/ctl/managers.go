package ctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/rpc"
)

// managerClient talks to managers' RPC listeners (HTTP/JSON routes).
type managerClient struct {
	hc     *http.Client
	scheme string
	addr   []string
}

func (g *globals) managerClient() (*managerClient, error) {
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
	secret := ""
	if g.secret != "" {
		s, err := config.ReadSecretFile("--cluster-secret-file", g.secret)
		if err != nil {
			return nil, usagef("%v", err)
		}
		secret = s
	}
	opSecret := ""
	if g.operatorSecret != "" {
		s, err := config.ReadSecretFile("--operator-secret-file", g.operatorSecret)
		if err != nil {
			return nil, usagef("%v", err)
		}
		opSecret = s
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	var tlsCfg *tls.Config // a clone of http.DefaultTransport may carry a TLS config of its own
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
		// its role): the operator routes take --operator-secret-file.
		c, err := certs.ClusterFromSecret(secret, certs.RoleManager)
		if err != nil {
			return nil, usagef("--cluster-secret-file: %v", err)
		}
		tlsCfg = c.ClientConfig()
	}
	t.TLSClientConfig = tlsCfg
	rt := rpc.WithOperatorSecret(rpc.WithSecret(t, secret), opSecret)
	return &managerClient{hc: &http.Client{Transport: rt}, scheme: rpc.Scheme(tlsCfg), addr: g.managers}, nil
}

// withManagers runs do with a manager client and the command's context.
func (g *globals) withManagers(cmd *cobra.Command, do func(context.Context, *managerClient) error) error {
	mc, err := g.managerClient()
	if err != nil {
		return err
	}
	ctx, cancel := g.context(cmd)
	defer cancel()
	return do(ctx, mc)
}

// call does one request to addr and decodes the answer into out, or returns
// the manager's *rpc.Error.
func (c *managerClient) call(ctx context.Context, method, addr, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+addr+path, body)
	if err != nil {
		return usagef("manager address %q: %v", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return answerError(method, addr+path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// answerError is a manager's non-200 answer: its *rpc.Error, or the status
// and the start of the body when it is not one.
func answerError(method, url string, status int, body []byte) error {
	var e rpc.Error
	if json.Unmarshal(body, &e) == nil && e.Code != "" {
		return &e
	}
	return fmt.Errorf("%s %s: HTTP %d: %.200s", method, url, status, body)
}

// any asks the managers in turn until one answers.
func (c *managerClient) any(ctx context.Context, path string, out any) error {
	var errs []error
	for _, a := range c.addr {
		err := c.call(ctx, http.MethodGet, a, path, nil, out)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
	}
	return fmt.Errorf("no manager answered: %w", errors.Join(errs...))
}

// leader sends a change to the leader: to the first manager that answers,
// then to the leader it names when it is not the leader.
func (c *managerClient) leader(ctx context.Context, path string, in, out any) error {
	var errs []error
	for _, a := range c.addr {
		err := c.call(ctx, http.MethodPost, a, path, in, out)
		var e *rpc.Error
		if errors.As(err, &e) && e.Code == rpc.CodeNotLeader && e.Leader != "" {
			err = c.call(ctx, http.MethodPost, e.Leader, path, in, out)
		}
		if err == nil {
			return nil
		}
		if errors.As(err, &e) && e.Code != rpc.CodeNotLeader && e.Code != rpc.CodeUnavailable {
			return err // the leader's answer: final
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
	}
	return fmt.Errorf("no leader took the change: %w", errors.Join(errs...))
}

func clusterCmd(g *globals) *cobra.Command {
	cluster := &cobra.Command{Use: "cluster", Short: "Look at a datacenter's managers", Args: exactArgs(0, "a subcommand: status or members")}
	status := &cobra.Command{
		Use:   "status",
		Short: "Every manager's view: Raft state, leader, term, indexes, voters",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *managerClient) error {
				type row struct {
					Addr   string      `json:"addr"`
					Status *rpc.Status `json:"status,omitempty"`
					Error  string      `json:"error,omitempty"`
				}
				var rows []row
				failed := 0
				for _, a := range mc.addr {
					var st rpc.Status
					if err := mc.call(ctx, http.MethodGet, a, "/rpc/v1/status", nil, &st); err != nil {
						rows = append(rows, row{Addr: a, Error: err.Error()})
						failed++
						continue
					}
					rows = append(rows, row{Addr: a, Status: &st})
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
				return nil
			})
		},
	}
	members := &cobra.Command{
		Use:   "members",
		Short: "The gossip pool's members (managers and gates) as a manager sees them",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *managerClient) error {
				var m rpc.Members
				if err := mc.any(ctx, rpc.OperatorMembersPath, &m); err != nil {
					return err
				}
				return g.print(m, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "NAME\tROLE\tDC\tSTATUS\tGOSSIP\tRPC\tRAFT")
					for _, x := range m.Members {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Name, x.Role, x.Datacenter, x.Status, x.Addr, dash(x.RPCAddr), dash(x.RaftAddr))
					}
				})
			})
		},
	}
	cluster.AddCommand(status, members)
	return cluster
}

func raftCmd(g *globals) *cobra.Command {
	r := &cobra.Command{Use: "raft", Short: "Look at and change the Raft configuration", Args: exactArgs(0, "a subcommand: peers, remove-peer or transfer-leader")}
	peers := &cobra.Command{
		Use:   "peers",
		Short: "The Raft servers, with the leader's autopilot health",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *managerClient) error {
				// The leader's status carries the autopilot's view of every server.
				var st rpc.Status
				if err := mc.any(ctx, "/rpc/v1/status?leader=1", &st); err != nil {
					var e *rpc.Error
					if !errors.As(err, &e) {
						if err := mc.any(ctx, "/rpc/v1/status", &st); err != nil {
							return err
						}
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
				return g.print(out, func(w *tabwriter.Writer) {
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
			})
		},
	}
	change := func(use, short, path string, args cobra.PositionalArgs) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: args,
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.withManagers(cmd, func(ctx context.Context, mc *managerClient) error {
					var req rpc.PeerRequest
					if len(args) > 0 {
						req.ID = args[0]
					}
					var res rpc.PeerResult
					if err := mc.leader(ctx, path, req, &res); err != nil {
						return err
					}
					return g.print(res, func(w *tabwriter.Writer) {
						fmt.Fprintf(w, "%s\tleader: %s\n", res.Done, dash(res.Leader))
					})
				})
			},
		}
	}
	r.AddCommand(peers,
		change("remove-peer ID", "Remove a dead manager from the Raft configuration (on the leader)", rpc.OperatorRemovePeerPath, exactArgs(1, "one Raft server ID")),
		change("transfer-leader [ID]", "Hand leadership to ID, or to the most up-to-date voter", rpc.OperatorTransferLeaderPath, maxArgs(1, "one Raft server ID")))
	return r
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stream does one request to the managers whose body is a file: GET writes
// the answer to out, PUT sends in. A "not leader" answer is followed to the
// leader it names.
func (c *managerClient) stream(ctx context.Context, method, path string, in func() (io.ReadCloser, error), out io.Writer) error {
	var errs []error
	try := func(addr string) error {
		var body io.ReadCloser
		if in != nil {
			b, err := in()
			if err != nil {
				return err
			}
			body = b
			defer b.Close()
		}
		req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+addr+path, body)
		if err != nil {
			return usagef("manager address %q: %v", addr, err)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			return answerError(method, addr+path, resp.StatusCode, b)
		}
		if out != nil {
			_, err = io.Copy(out, resp.Body)
		}
		return err
	}
	for _, a := range c.addr {
		err := try(a)
		var e *rpc.Error
		if errors.As(err, &e) && e.Code == rpc.CodeNotLeader && e.Leader != "" {
			err = try(e.Leader)
		}
		if err == nil {
			return nil
		}
		if errors.As(err, &e) && e.Code != rpc.CodeNotLeader && e.Code != rpc.CodeUnavailable {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
	}
	return fmt.Errorf("no leader answered: %w", errors.Join(errs...))
}

func snapshotCmd(g *globals) *cobra.Command {
	snap := &cobra.Command{Use: "snapshot", Short: "Save and restore the datacenter's ledger (backups)", Args: exactArgs(0, "a subcommand: save or restore")}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot archive of the leader's ledger to FILE",
		Args:  exactArgs(1, "the archive's file name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *managerClient) error {
				tmp := args[0] + ".part"
				f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					return err
				}
				err = mc.stream(ctx, http.MethodGet, rpc.OperatorSnapshotPath, nil, f)
				if err == nil {
					err = f.Sync()
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err == nil {
					err = os.Rename(tmp, args[0])
				}
				if err != nil {
					_ = os.Remove(tmp)
					return err
				}
				st, _ := os.Stat(args[0])
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
			if _, err := os.Stat(args[0]); err != nil {
				return usagef("%v", err)
			}
			return g.withManagers(cmd, func(ctx context.Context, mc *managerClient) error {
				open := func() (io.ReadCloser, error) { return os.Open(args[0]) }
				if err := mc.stream(ctx, http.MethodPut, rpc.OperatorSnapshotPath, open, io.Discard); err != nil {
					return err
				}
				return g.print(map[string]any{"restored": args[0]}, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "restored %s\n", args[0])
				})
			})
		},
	}
	snap.AddCommand(save, restore)
	return snap
}
