package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// FederationPath is the manager's read endpoint of the federation view:
//
//	GET /rpc/v1/federation → Federation
const FederationPath = "/rpc/v1/federation"

// FederationMemory is how long managers and gates keep a datacenter that the
// WAN pool (or the view they read) no longer names: a restarted manager that
// has not rejoined the pool yet still knows the federation, so gates answer
// 503 for a datacenter that is unreachable for now, never 400 for one that
// exists. Consul reaps a WAN member after 72 hours the same way.
const FederationMemory = 72 * time.Hour

// Federation is a manager's view of the datacenters of the federation: every
// datacenter whose managers it knows through the WAN gossip pool (its own
// included, from the LAN pool), with their managers' RPC addresses. Gates
// read it to forward submissions to other datacenters' leaders directly.
type Federation struct {
	// Datacenter is the answering manager's own datacenter.
	Datacenter string `json:"datacenter"`
	// Datacenters maps each datacenter's name to its managers' RPC addresses
	// (host:port), sorted.
	Datacenters map[string][]string `json:"datacenters"`
}

// FederationHandler serves GET FederationPath from view; mount it on the
// manager's RPC mux.
func FederationHandler(view func() *Federation) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := json.Marshal(view())
		if err != nil {
			writeError(w, Errorf(CodeInternal, "encode federation: %v", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
}

// FetchFederation reads the federation view of the manager at addr
// (host:port), once, without retries; scheme is Scheme's.
func FetchFederation(ctx context.Context, hc *http.Client, scheme, addr string) (*Federation, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+FederationPath, nil)
	if err != nil {
		return nil, Errorf(CodeInvalid, "build request: %v", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rpc GET %s%s: %w", addr, FederationPath, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBytes))
	if err != nil {
		return nil, fmt.Errorf("rpc GET %s%s: read: %w", addr, FederationPath, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp.StatusCode, b)
	}
	var f Federation
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, Errorf(CodeInternal, "decode federation: %v", err)
	}
	return &f, nil
}
