package faultnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// WANFileEnv names the file through which a fault-injection process (a
// manager or a gate of the tests module) takes its WAN cut: the harness
// writes the rule there, the process applies it and acknowledges it in the
// file's Ack path. A file is used, not an endpoint, because a gate has no
// debug listener and the cut must reach every process of both datacenters
// the same way.
const WANFileEnv = "FAULTNET_WAN_FILE"

// wanPoll is how often a process looks at its WAN file.
const wanPoll = 50 * time.Millisecond

// WANRule is the content of a WAN file: the addresses (host:port) the
// process must not reach, and a generation the harness raises on every
// write so it can wait for the process to acknowledge that very rule.
type WANRule struct {
	Generation uint64   `json:"generation"`
	Block      []string `json:"block"`
}

// Ack is the path where a process acknowledges the rule of the WAN file
// path: the generation it applies, written once the rule is in force.
func Ack(path string) string { return path + ".applied" }

// ReadWANRule reads a WAN file, or its Ack file. A missing file is the zero
// rule: nothing blocked.
func ReadWANRule(path string) (WANRule, error) {
	var r WANRule
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("faultnet: WAN file %s: %w", path, err)
	}
	return r, nil
}

// WriteWANRule writes r to path atomically (a file beside it renamed over
// it), so a process never reads half a rule.
func WriteWANRule(path string, r WANRule) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// WANFromEnv returns the WAN of a process started with WANFileEnv set, with
// the file's current rule already in force (a process restarted during a
// cut starts cut), and follows the file until ctx ends or stop is called
// (stop returns once it no longer does). Without the variable it returns a
// nil WAN: nothing is cut.
func WANFromEnv(ctx context.Context, environ []string) (w *WAN, stop func(), err error) {
	path := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, WANFileEnv+"="); ok {
			path = v
		}
	}
	if path == "" {
		return nil, func() {}, nil
	}
	w = NewWAN()
	applied, err := w.follow(path, 0, true)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(wanPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A bad or half-written file is read again at the next tick; the
			// harness waits for the acknowledgement, so it sees the stall.
			if g, err := w.follow(path, applied, false); err == nil {
				applied = g
			}
		}
	}()
	return w, func() { cancel(); <-done }, nil
}

// follow applies path's rule when its generation differs from applied (or
// always, with force), and acknowledges it; it returns the generation in
// force.
func (w *WAN) follow(path string, applied uint64, force bool) (uint64, error) {
	r, err := ReadWANRule(path)
	if err != nil {
		return applied, err
	}
	if r.Generation == applied && !force {
		return applied, nil
	}
	w.Set(r.Block)
	if r.Generation == 0 {
		return 0, nil
	}
	if err := WriteWANRule(Ack(path), WANRule{Generation: r.Generation, Block: slices.Clone(r.Block)}); err != nil {
		return applied, err
	}
	return r.Generation, nil
}
