// Command oncepeer-etcd runs one etcd 3.6 server, a member of the cluster
// that `make bench-peers` measures once against (tests/benchrun drives it
// with the same load generator and workloads, through etcd's client).
//
//	oncepeer-etcd member -name m1 -dir D -client URL -peer URL -cluster m1=URL,m2=URL,m3=URL
//
// A member is the embed package with etcd's defaults (an fsync per commit, as
// once's managers), TLS on its client and peer URLs with certificates it
// generates (once's cluster is encrypted by default too), the backend quota
// raised so no run can reach it. It
// prints "ready" on stdout once it serves, and runs until SIGTERM, SIGINT or
// its stdin closes.
//
// It is a module of its own so that the servers run with etcd's own
// dependency versions, never the product's or the test tooling's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The parent closing our stdin also stops us: a killed benchmark leaves
	// no etcd behind.
	ctx, cancel := context.WithCancel(ctx)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: oncepeer-etcd member [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "member":
		err = member(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (member)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "oncepeer-etcd:", err)
		os.Exit(1)
	}
}

func member(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	client := fs.String("client", "", "client URL (https://127.0.0.1:port)")
	peer := fs.String("peer", "", "peer URL (https://127.0.0.1:port)")
	cluster := fs.String("cluster", "", "initial cluster: name=peerURL,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cu, err := url.Parse(*client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *cluster
	cfg.InitialClusterToken = "once-bench-peers"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel = "warn"
	// Encrypted as once's cluster is by default: TLS on the client and peer
	// URLs (https), with certificates etcd generates itself.
	cfg.ClientAutoTLS, cfg.PeerAutoTLS = true, true
	cfg.SelfSignedCertValidity = 1
	// Room for any run at any machine's speed: the quota must not end a
	// workload (8 GiB, etcd's documented maximum suggestion).
	cfg.QuotaBackendBytes = 8 << 30
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		return err
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-ctx.Done():
		return nil
	}
}
