// Command oncepeer-etcd runs etcd 3.6 as the peer that `make bench-peers`
// measures once against, with the same load generator and workloads.
//
//	oncepeer-etcd member -name m1 -dir D -client URL -peer URL -cluster m1=URL,m2=URL,m3=URL
//	oncepeer-etcd gate -listen 127.0.0.1:0 -endpoints URL,URL,URL
//
// A member is one etcd server (the embed package, default settings: fsync on
// every commit, as once's managers). A gate is the HTTP front the load
// generator talks to, shaped like a once gate: POST /v1/jobs with an
// Idempotency-Key runs one etcd transaction, put-if-absent of the key with
// the job, and on conflict a read of the stored job in the same transaction;
// a new key is 201, an existing one the stored job (200, Idempotent-Replayed:
// true), or 422 when the body differs. Both print one line on stdout when
// they are ready ("ready" and "listening <url>") and run until SIGTERM,
// SIGINT or their stdin closes.
//
// It is a module of its own so that etcd's dependency graph never meets the
// product's or the test tooling's.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
		fmt.Fprintln(os.Stderr, "usage: oncepeer-etcd member|gate [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "member":
		err = member(ctx, os.Args[2:])
	case "gate":
		err = gate(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (member, gate)", os.Args[1])
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
	client := fs.String("client", "", "client URL (http://127.0.0.1:port)")
	peer := fs.String("peer", "", "peer URL (http://127.0.0.1:port)")
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

func gate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "HTTP listen address")
	endpoints := fs.String("endpoints", "", "comma-separated etcd client URLs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &front{kv: cli}, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Println("listening", "http://"+ln.Addr().String())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// front answers the load generator as a once gate would, from etcd.
type front struct{ kv clientv3.KV }

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet { // the load generator's /healthz
		w.WriteHeader(http.StatusOK)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(r.Body)
	if key == "" || err != nil {
		http.Error(w, "idempotency key and body required", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256([]byte(key))
	job := make([]byte, 0, len(body)+64)
	job = append(job, `{"job_id":"`...)
	job = hex.AppendEncode(job, sum[:16])
	job = append(job, `","request":`...)
	job = append(job, bytes.TrimSpace(body)...)
	job = append(job, "}\n"...)

	k := "/once/jobs/" + key
	resp, err := f.kv.Txn(r.Context()).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(job))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if resp.Succeeded {
		h.Set("Idempotent-Replayed", "false")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(job)
		return
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 { // removed between the compare and the read: cannot happen without deletes
		http.Error(w, "key vanished", http.StatusServiceUnavailable)
		return
	}
	stored := kvs[0].Value
	if !bytes.Equal(stored, job) {
		h.Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"type":"idempotency_key_reused","status":422}` + "\n"))
		return
	}
	h.Set("Idempotent-Replayed", "true")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(stored)
}
