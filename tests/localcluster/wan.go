package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/tests/faultnet"
)

// wanGeneration numbers the WAN rules this process writes, so each write is
// acknowledged as itself (faultnet.WANRule.Generation).
var wanGeneration atomic.Uint64

// wanFile is where the node takes its WAN cut from (faultnet.WANFileEnv).
func (n *Node) wanFile() string {
	return filepath.Join(n.c.opts.BaseDir, "faults", n.Name+".wan.json")
}

// CutWAN cuts the network between the federation's datacenters, not the
// processes: every manager and gate of each datacenter stops reaching the
// managers of the others (their RPC listeners and WAN gossip addresses:
// connections refused, the open ones closed, gossip packets dropped) while
// every process keeps running and each datacenter's own links stay. It
// returns once every running process has the cut in force; a process
// started later starts cut. It needs Options.Failpoints (the processes
// follow their WAN files only then).
func (f *Federation) CutWAN(ctx context.Context) error { return f.setWAN(ctx, true) }

// HealWAN undoes CutWAN, waiting for every running process as CutWAN does.
func (f *Federation) HealWAN(ctx context.Context) error { return f.setWAN(ctx, false) }

func (f *Federation) setWAN(ctx context.Context, cut bool) error {
	gen := wanGeneration.Add(1)
	var nodes []*Node
	for _, c := range f.DCs {
		if !c.opts.Failpoints {
			return fmt.Errorf("localcluster: datacenter %s runs without Failpoints: its processes take no WAN cut", c.opts.Datacenter)
		}
		var block []string
		if cut {
			for _, other := range f.DCs {
				if other == c {
					continue
				}
				for _, m := range other.Managers {
					block = append(block, m.HTTPAddr)
					if m.WANGossip != "" {
						block = append(block, m.WANGossip)
					}
				}
			}
		}
		for _, n := range c.All() {
			if err := os.MkdirAll(filepath.Dir(n.wanFile()), 0o755); err != nil {
				return err
			}
			if err := faultnet.WriteWANRule(n.wanFile(), faultnet.WANRule{Generation: gen, Block: block}); err != nil {
				return err
			}
			nodes = append(nodes, n)
		}
	}
	var missing []string
	for _, n := range nodes {
		if err := n.waitWAN(ctx, gen); err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", n.Name, err))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("localcluster: the WAN rule is not in force on every process: %v", missing)
	}
	return nil
}

// waitWAN waits until n acknowledges the WAN rule gen, or is not running
// (it reads the rule when it starts again).
func (n *Node) waitWAN(ctx context.Context, gen uint64) error {
	for {
		if !n.Running() {
			return nil
		}
		r, err := faultnet.ReadWANRule(faultnet.Ack(n.wanFile()))
		if err == nil && r.Generation == gen {
			return nil
		}
		if perr := pause(ctx, 20*time.Millisecond); perr != nil {
			return errors.Join(perr, err)
		}
	}
}
