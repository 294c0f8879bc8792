package ctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// ErrKeyringIncomplete: a keyring command reached the pool, but not every
// member answered, or some refused; the output says which.
var ErrKeyringIncomplete = errors.New("not every member of the pool applied it")

// gossipCmd is `oncectl gossip keyring list|install|use|remove`: the gossip
// keyring of every member of a pool (managers and gates of the datacenter,
// or with --wan the managers of every datacenter), changed through one
// manager (consul keyring's conventions).
func gossipCmd(g *globals) *cobra.Command {
	gossip := &cobra.Command{Use: "gossip", Short: "The gossip pools' encryption keys"}
	keyring := &cobra.Command{
		Use:   "keyring",
		Short: "List or rotate the gossip keys of every member of a pool",
		Long: `List or rotate the gossip encryption keys of every member of a pool, through
one manager: the LAN pool of its datacenter (managers and gates), or with --wan
the WAN pool (the managers of every datacenter). A rotation is three steps,
each applied to every member before the next: install the new key, use it,
remove the old one. Restart members with the new key in their settings
(MANAGER_GOSSIP_KEY, GATE_GOSSIP_KEY) from the use step on.`,
	}
	var wan bool
	keyring.PersistentFlags().BoolVar(&wan, "wan", false, "the WAN pool (managers of every datacenter) instead of the datacenter's LAN pool")
	pool := func() string {
		if wan {
			return rpc.PoolWAN
		}
		return rpc.PoolLAN
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "Every key of the pool, and how many members hold and use it",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
				return g.printKeyring(mc.Keyring(ctx, pool()))
			})
		},
	}
	change := func(op, short string) *cobra.Command {
		return &cobra.Command{
			Use:   op + " KEY",
			Short: short,
			Args:  exactArgs(1, "the base64 gossip key"),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.withManagers(cmd, func(ctx context.Context, mc *rpc.Client) error {
					return g.printKeyring(mc.ChangeKeyring(ctx, &rpcpb.KeyringRequest{Op: op, Key: args[0], Pool: pool()}))
				})
			},
		}
	}
	withSubcommands(keyring, list,
		change("install", "Add a key to every member's keyring (it decrypts; the primary key still encrypts)"),
		change("use", "Make an installed key every member's primary (encrypting) key"),
		change("remove", "Remove a key that no member uses as its primary key"))
	return withSubcommands(gossip, keyring)
}

// printKeyring prints a keyring answer and fails when not every member
// applied it, or returns the call's error.
func (g *globals) printKeyring(k *rpcpb.KeyringResponse, err error) error {
	if err != nil {
		return err
	}
	err = g.print(k, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "%s pool, asked through %s: %d members answered\n", strings.ToUpper(k.Pool), k.Node, k.Members)
		fmt.Fprintln(w, "KEY\tINSTALLED\tPRIMARY")
		for _, key := range k.Keys {
			fmt.Fprintf(w, "%s\t%d/%d\t%d/%d\n", key.Key, key.Installed, k.Members, key.Primary, k.Members)
		}
		for _, n := range k.Nodes {
			if n.Error != "" {
				fmt.Fprintf(w, "%s refused: %s\n", n.Node, n.Error)
			}
		}
		if len(k.NoAnswer) > 0 {
			fmt.Fprintf(w, "no answer from: %s\n", strings.Join(k.NoAnswer, ", "))
		}
	})
	if err != nil {
		return err
	}
	if !k.Complete {
		return fmt.Errorf("%s: %w", k.Op, ErrKeyringIncomplete)
	}
	return nil
}
