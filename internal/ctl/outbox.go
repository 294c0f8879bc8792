package ctl

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// outboxCmd is `oncectl outbox forget DC`: stop the leader's outbox
// carrying submissions to a datacenter taken out of the federation for good
// (Consul's force-leave).
func outboxCmd(g *globals) *cobra.Command {
	outbox := &cobra.Command{Use: "outbox", Short: "The submissions the leader carries to the other datacenters"}
	forget := &cobra.Command{
		Use:   "forget DC",
		Short: "Stop carrying submissions to datacenter DC, gone for good (on the leader)",
		Long: `Record every multi-datacenter submission of the ledger that names DC and that DC
has not confirmed as confirmed by DC, so that the leader's outbox stops carrying
it there: its count (MANAGER_OUTBOX_MAX_ENTRIES, the backlog gauges) frees. For a
datacenter taken out of the federation for good: refused while one of its
managers is alive in the WAN pool, for this datacenter, and for a name the
federation does not know that the outbox owes nothing. The jobs forgotten
are not carried to DC even if it comes back. A second run forgets only what was
submitted since.`,
		Args: exactArgs(1, "the datacenter to forget"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dc := args[0]
			if !api.ValidName(dc, api.MaxDatacenterLen) {
				return usagef("datacenter %q: want 1 to %d characters of A-Z a-z 0-9 . _ -", dc, api.MaxDatacenterLen)
			}
			return g.withOneDatacenter(cmd, func(ctx context.Context, mc *rpc.Client) error {
				res, err := mc.ForgetDatacenter(ctx, dc)
				if err != nil {
					return err
				}
				return g.print(res, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "forgot %d submission(s) carried to %s\n", res.Pairs, res.Datacenter)
				})
			})
		},
	}
	return withSubcommands(outbox, forget)
}
