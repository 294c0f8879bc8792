package ctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// EnvOperatorTokenFile is cluster view's --operator-token-file: a file
// holding an operator's bearer token for the gates (one of the gate's
// GATE_OPERATOR_TOKEN_FILE tokens).
const EnvOperatorTokenFile = "ONCE_OPERATOR_TOKEN_FILE"

// maxTokenBytes bounds the operator token file (a token is at most 512
// characters; docs/api.md, "Tenancy").
const maxTokenBytes = 4096

// ErrNoLeader: cluster view's gate answered, but no leader of its
// datacenter answered the gate.
var ErrNoLeader = errors.New("no manager leader of the gate's datacenter answered the gate")

// readTokenFile reads an operator token: the file's content without the
// white space around it, one token.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("%s: longer than %d bytes: want one token", path, maxTokenBytes)
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("%s: want one token (the file's only word)", path)
	}
	if headerUnsafe(t) { // the token is not echoed
		return "", fmt.Errorf("%s: the token holds a control character, which an HTTP header cannot carry", path)
	}
	return t, nil
}

// clusterViewCmd is cluster view: GET /v1/cluster through the gates.
func clusterViewCmd(g *globals) *cobra.Command {
	tokenFile := os.Getenv(EnvOperatorTokenFile)
	cmd := &cobra.Command{
		Use:   "view [--operator-token-file FILE]",
		Short: "The cluster as a gate reports it (GET /v1/cluster): leader, jobs, budgets, managers, gates, datacenters",
		Long: `Ask a gate of --gates for GET /v1/cluster, the operators' view of the
cluster that the web console's cluster view shows: the gate's datacenter's
leader, its jobs by state and its ledger's budgets, every manager the gate
resolves, the gates of its gossip pool, and the federation's datacenters
with their leaders.

The gate wants an operator's bearer token (a token of its
GATE_OPERATOR_TOKEN_FILE): give a file holding it with --operator-token-file
(env ` + EnvOperatorTokenFile + `); without one, --token is sent (a gate with no token
file answers anyone). Exits 1 when the gate refuses (401 for a tenant's
token) or cannot be reached, and when no leader of its datacenter answered
it (the view is printed first).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --operator-token-file "" would send --token instead.
			if err := noEmptyValue(cmd, "operator-token-file", "file name", tokenFile); err != nil {
				return err
			}
			if tokenFile != "" {
				t, err := readTokenFile(tokenFile)
				if err != nil {
					return usagef("--operator-token-file: %v", err)
				}
				g.token = t // the operator's token is this command's --token
			}
			return g.withGates(cmd, nil, g.clusterView)
		},
	}
	cmd.Flags().StringVar(&tokenFile, "operator-token-file", tokenFile, "file holding an operator's bearer token for the gate (env "+EnvOperatorTokenFile+")")
	return cmd
}

func (g *globals) clusterView(ctx context.Context, c *client.Client) error {
	v, err := c.Cluster(ctx)
	if err != nil {
		return err
	}
	if err := g.print(v, func(w *tabwriter.Writer) { clusterTable(w, v) }); err != nil {
		return err
	}
	if v.Leader == nil {
		return ErrNoLeader
	}
	return nil
}

// clusterTable prints the view in sections, one table each: the gate's
// datacenter and leader, its jobs by state, the leader's budgets, the
// managers, the gates and the datacenters.
func clusterTable(w *tabwriter.Writer, v *api.Cluster) {
	fmt.Fprintln(w, "GATE\tDATACENTER\tLEADER\tTERM\tCOMMIT\tLEDGER TIME")
	l := v.Leader
	if l == nil {
		fmt.Fprintf(w, "%s\t%s\t(none answered)\n", v.Gate, v.Datacenter)
	} else {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", v.Gate, v.Datacenter, l.NodeID, l.Term, l.CommitIndex, dash(l.LedgerTime))
	}
	if l != nil && l.Queues != nil {
		q := l.Queues
		fmt.Fprintln(w, "\nQUEUED\tRUNNING\tSUCCEEDED\tFAILED\tDEAD\tCANCELLED")
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\n", q.Queued, q.Running, q.Succeeded, q.Failed, q.Dead, q.Cancelled)
	}
	if l != nil && l.Budgets != nil {
		b := l.Budgets
		fmt.Fprintln(w, "\nBUDGET\tUSED\tMAX")
		fmt.Fprintf(w, "entries\t%d\t%d\n", b.Entries, b.MaxEntries)
		fmt.Fprintf(w, "bytes\t%d\t%s\n", b.Bytes, bound(b.MaxBytes))
		fmt.Fprintf(w, "queued jobs\t%d\t%d\n", b.Queued, b.MaxQueued)
		fmt.Fprintf(w, "outbox\t%d\t%d\n", b.Outbox, b.OutboxMax)
	}
	fmt.Fprintln(w, "\nMANAGER\tADDR\tSTATE\tTERM\tCOMMIT\tCLOCK VS GROUP\tOUTBOX")
	for _, m := range v.Managers {
		s := m.Status
		if s == nil {
			fmt.Fprintf(w, "?\t%s\t(%s)\n", m.Addr, m.Error)
			continue
		}
		clock, outbox := "-", "-"
		if s.ClockGroupOffset != nil {
			clock = fmt.Sprintf("%.3fs", *s.ClockGroupOffset)
		}
		if s.Budgets != nil {
			outbox = fmt.Sprint(s.Budgets.Outbox)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.NodeID, m.Addr, s.RaftState, s.Term, s.CommitIndex, clock, outbox)
	}
	fmt.Fprintln(w, "\nGATE\tDC\tADDR\tSTATE")
	for _, x := range v.Gates {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", x.Name, dash(x.Datacenter), dash(x.Addr), dash(x.State))
	}
	fmt.Fprintln(w, "\nDATACENTER\tMANAGERS\tLEADER\tTERM\tOUTBOX")
	for _, d := range v.Datacenters {
		managers := dash(strings.Join(d.Managers, ","))
		switch s := d.Leader; {
		case s == nil:
			fmt.Fprintf(w, "%s\t%s\t(%s)\n", d.Name, managers, dash(d.Error))
		case s.Budgets == nil:
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t-\n", d.Name, managers, s.NodeID, s.Term)
		default:
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d/%d\n", d.Name, managers, s.NodeID, s.Term, s.Budgets.Outbox, s.Budgets.OutboxMax)
		}
	}
}

// bound is a budget's maximum, "none" for 0 (unbounded).
func bound(n int64) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
