package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// StatusView is what `make run` shows of a cluster: who leads, in which term,
// and which processes are down or not ready. It is compared between polls;
// a line is printed only when it changes.
type StatusView struct {
	Leader   string   // "" while there is none
	Term     uint64   // the leader's term
	Down     []string // processes not running, sorted
	NotReady []string // running gates whose /readyz is not 200, sorted
}

// Observe reads the cluster once: each running manager's status and each
// running gate's readiness, within ctx.
func (c *Cluster) Observe(ctx context.Context) StatusView {
	var v StatusView
	for _, n := range c.Managers {
		if !n.Running() {
			v.Down = append(v.Down, n.Name)
			continue
		}
		if st, err := c.Status(ctx, n); err == nil && st.IsLeader && v.Leader == "" {
			v.Leader, v.Term = n.Name, st.Term
		}
	}
	for _, g := range c.Gates {
		if !g.Running() {
			v.Down = append(v.Down, g.Name)
			continue
		}
		if !c.gateReady(ctx, g) {
			v.NotReady = append(v.NotReady, g.Name)
		}
	}
	slices.Sort(v.Down)
	slices.Sort(v.NotReady)
	return v
}

func (c *Cluster) gateReady(ctx context.Context, g *Node) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.gateScheme()+"://"+g.HTTPAddr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Line renders the view as one status line.
func (v StatusView) Line() string {
	var b strings.Builder
	if v.Leader == "" {
		b.WriteString("no leader")
	} else {
		fmt.Fprintf(&b, "leader %s (term %d)", v.Leader, v.Term)
	}
	if len(v.Down) > 0 {
		fmt.Fprintf(&b, "; down: %s", strings.Join(v.Down, ", "))
	}
	if len(v.NotReady) > 0 {
		fmt.Fprintf(&b, "; not ready: %s", strings.Join(v.NotReady, ", "))
	}
	if len(v.Down) == 0 && len(v.NotReady) == 0 && v.Leader != "" {
		b.WriteString("; all processes up")
	}
	return b.String()
}

// Equal reports whether two views would print the same line.
func (v StatusView) Equal(o StatusView) bool { return v.Line() == o.Line() }

// WriteSummary prints what `make run` shows once the cluster is ready: the
// processes and their addresses, a curl that works, where the logs are.
func (c *Cluster) WriteSummary(w io.Writer, streaming bool) {
	fmt.Fprintf(w, "\nonce is running: datacenter %s, %d managers, %d gates\n", c.opts.Datacenter, len(c.Managers), len(c.Gates))
	for _, n := range c.Managers {
		fmt.Fprintf(w, "  %-9s rpc %-21s log %s\n", n.Name, n.HTTPAddr, n.LogPath)
	}
	for _, g := range c.Gates {
		fmt.Fprintf(w, "  %-9s %-25s log %s\n", g.Name, c.gateScheme()+"://"+g.HTTPAddr, g.LogPath)
	}
	fmt.Fprintf(w, "Data: %s\n", c.opts.BaseDir+"/data")
	c.writeSecurity(w)
	if !streaming {
		fmt.Fprintln(w, "Process logs go to the files above (make run RUN_ARGS=-logs, or oncelocal -logs, streams them here instead).")
	}
	fmt.Fprintf(w, `Try:
  curl -si -XPOST localhost:%s/v1/jobs -H 'Idempotency-Key: host1.dc1:12345:1:0123456789abcdef' -d '{"type":"demo","payload":{"n":1}}'
  %s raft peers
Press Ctrl-C to stop.

`, c.Gates[0].port(), c.oncectlLine())
}

// writeSecurity says how the cluster's traffic is secured, and how oncectl
// reaches the managers.
func (c *Cluster) writeSecurity(w io.Writer) {
	switch {
	case c.opts.Insecure:
		fmt.Fprintln(w, "INSECURE (-insecure): RPC, Raft and gossip are unauthenticated and plaintext, and the operator commands (snapshot restore, raft peer removal, keyring) are open; anyone who reaches the ports controls the cluster.")
	case c.opts.TLS != nil:
		fmt.Fprintf(w, "Secured: mutual TLS with the cluster CA on RPC and Raft; gossip encrypted; operator commands need the operator secret %s.\n", c.OperatorSecretFile())
	default:
		fmt.Fprintf(w, "Secured: cluster secret %s; RPC and Raft over mutual TLS with the CA derived from it, gossip encrypted with keys derived from it; operator commands need the operator secret %s.\n", c.SecretFile(), c.OperatorSecretFile())
	}
	fmt.Fprintf(w, "oncectl: %s ...\n", c.oncectlLine())
}

// oncectlLine is oncectl pointed at every manager of the cluster with its
// credential flags, the operator secret's included.
func (c *Cluster) oncectlLine() string {
	var rpcs []string
	for _, n := range c.Managers {
		rpcs = append(rpcs, n.HTTPAddr)
	}
	return strings.Join(append([]string{"oncectl", "--managers", strings.Join(rpcs, ",")}, c.OncectlArgs()...), " ")
}

// WatchStatus prints the cluster's status line now and then whenever it
// changes (polled every interval), stamped with the time, until ctx ends.
func (c *Cluster) WatchStatus(ctx context.Context, w io.Writer, interval time.Duration) {
	var last StatusView
	first := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		octx, cancel := context.WithTimeout(ctx, interval)
		v := c.Observe(octx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if first || !v.Equal(last) {
			fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), v.Line())
			last, first = v, false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
