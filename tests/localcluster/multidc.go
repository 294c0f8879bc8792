package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"time"
)

// DatacenterSpec is one datacenter of a federation: its name, how many
// managers and gates, and the gates' fixed HTTP ports (empty: free ports).
type DatacenterSpec struct {
	Name      string
	Managers  int
	Gates     int
	GatePorts []int
}

// Federation is several datacenters, each a Cluster of its own under
// BaseDir/<name>, whose managers join one WAN pool: the first datacenter's
// first manager is every other datacenter's WAN seed.
type Federation struct {
	DCs []*Cluster
}

// NewFederation lays out one Cluster per spec from base (BinDir, Env, Fast,
// Failpoints, Stdout…; Datacenter, Managers, Gates, GatePorts and BaseDir are
// the spec's) without starting anything.
func NewFederation(base Options, specs []DatacenterSpec) (*Federation, error) {
	if base.BaseDir == "" {
		return nil, errors.New("localcluster: BaseDir is required")
	}
	// One secret for the whole federation, as in production.
	if _, err := ensureCredential(&base, base.BaseDir); err != nil {
		return nil, err
	}
	f := &Federation{}
	var seeds []string
	for _, s := range specs {
		o := base
		o.Datacenter, o.Managers, o.Gates, o.GatePorts = s.Name, s.Managers, s.Gates, s.GatePorts
		o.BaseDir = filepath.Join(base.BaseDir, s.Name)
		o.WAN, o.WANJoin = true, seeds
		c, err := New(o)
		if err != nil {
			return nil, err
		}
		if len(seeds) == 0 {
			seeds = []string{c.Managers[0].WANGossip}
		}
		f.DCs = append(f.DCs, c)
	}
	return f, nil
}

// DC returns the datacenter named name, or nil.
func (f *Federation) DC(name string) *Cluster {
	for _, c := range f.DCs {
		if c.opts.Datacenter == name {
			return c
		}
	}
	return nil
}

// StartReady starts every datacenter, waits until each has a leader and ready
// gates, then until every gate knows every datacenter (WaitFederated). On
// failure everything is stopped.
func (f *Federation) StartReady(ctx context.Context) error {
	for _, c := range f.DCs {
		if err := c.Start(); err != nil {
			f.Stop()
			return err
		}
	}
	for _, c := range f.DCs {
		if err := c.waitStarted(ctx); err != nil {
			f.Stop()
			return err
		}
	}
	if err := f.WaitFederated(ctx); err != nil {
		f.Stop()
		return err
	}
	return nil
}

// waitStarted waits for a leader and every gate's readiness.
func (c *Cluster) waitStarted(ctx context.Context) error {
	_, err := c.WaitLeader(ctx)
	if err == nil {
		err = c.WaitReady(ctx)
	}
	if err != nil {
		return fmt.Errorf("localcluster: %s not ready (logs in %s): %w", c.opts.Datacenter, filepath.Join(c.opts.BaseDir, "logs"), err)
	}
	return nil
}

// WaitFederated polls until every running gate of every datacenter lists the
// jobs of every datacenter (GET /v1/jobs?datacenter=NAME answers 200; a gate
// that does not know NAME yet answers 503 while its federation forms, 400
// once formed).
func (f *Federation) WaitFederated(ctx context.Context) error {
	for _, c := range f.DCs {
		for _, g := range c.Gates {
			if !g.Running() {
				continue
			}
			for _, other := range f.DCs {
				url := c.gateScheme() + "://" + g.HTTPAddr + "/v1/jobs?limit=1&datacenter=" + other.opts.Datacenter
				if err := c.waitStatus(ctx, url, http.StatusOK); err != nil {
					return fmt.Errorf("localcluster: gate %s of %s does not know datacenter %s (see %s): %w",
						g.Name, c.opts.Datacenter, other.opts.Datacenter, g.LogPath, err)
				}
			}
		}
	}
	return nil
}

// waitStatus polls GET url (of a gate, with Options.GateToken) until it
// answers status.
func (c *Cluster) waitStatus(ctx context.Context, url string, status int) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if c.opts.GateToken != "" {
			req.Header.Set("Authorization", "Bearer "+c.opts.GateToken)
		}
		resp, err := c.client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status {
				return nil
			}
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// Stop stops every datacenter's processes.
func (f *Federation) Stop() {
	var wg sync.WaitGroup
	for _, c := range f.DCs {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop() }()
	}
	wg.Wait()
}
