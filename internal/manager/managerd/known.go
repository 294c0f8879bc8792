package managerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
)

// knownDatacentersFile is where, under MANAGER_DATA_DIR, a federated manager
// keeps the other datacenters it has seen in the WAN pool.
const knownDatacentersFile = "federation.json"

// knownDatacenter is one remembered datacenter: when the WAN pool last named
// it and the RPC addresses its alive managers last had.
type knownDatacenter struct {
	Seen time.Time `json:"seen"`
	RPC  []string  `json:"rpc"`
}

// knownDatacenters remembers, in a file of the data directory, every other
// datacenter the WAN pool has named within rpc.FederationMemory, as Consul's
// serf snapshots remember WAN members. After a restart the WAN pool knows no
// one until it has rejoined, which takes as long as the other datacenters
// take to answer (forever while they are cut off); until then the view would
// miss them, and gates would refuse valid submissions naming them as
// unknown. With this memory the view keeps them, with their last addresses:
// reachable if those still serve, 503 (retry later) if not.
type knownDatacenters struct {
	path string
	log  *slog.Logger

	mu sync.Mutex
	dc map[string]knownDatacenter
	// saved is when the file was last written.
	saved time.Time
}

// knownSaveEvery bounds how often the file is rewritten only to move the
// "seen" times forward; a new datacenter or new addresses are written at once.
const knownSaveEvery = time.Hour

// loadKnownDatacenters reads path; a missing file is an empty memory, an empty
// path one that is never saved. A file
// that cannot be parsed is an error: the operator removes it to start afresh.
func loadKnownDatacenters(path string, log *slog.Logger) (*knownDatacenters, error) {
	k := &knownDatacenters{path: path, log: log, dc: map[string]knownDatacenter{}}
	if path == "" {
		return k, nil
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return k, nil
	case err != nil:
		return nil, fmt.Errorf("known datacenters: %w", err)
	}
	if err := json.Unmarshal(b, &k.dc); err != nil {
		return nil, fmt.Errorf("known datacenters: %s: %w (remove the file to forget them)", path, err)
	}
	if len(k.dc) > 0 {
		log.Info("remembered datacenters of the federation", logging.KeyDatacenter, slices.Sorted(maps.Keys(k.dc)))
	}
	return k, nil
}

// merge records the datacenters of view (other than own) as seen at now and
// adds to view, with their last addresses, those remembered but not in it;
// it forgets those not seen for rpc.FederationMemory and saves what changed.
func (k *knownDatacenters) merge(view map[string][]string, own string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := false
	for dc, addrs := range view {
		if dc == own {
			continue
		}
		old, ok := k.dc[dc]
		if len(addrs) == 0 && ok {
			// The pool knows dc's managers but none alive: the view says
			// so (unreachable), the memory keeps the last addresses.
			addrs = old.RPC
		}
		if !ok || !slices.Equal(old.RPC, addrs) {
			changed = true
		}
		k.dc[dc] = knownDatacenter{Seen: now, RPC: slices.Clone(addrs)}
	}
	for dc, d := range k.dc {
		if _, ok := view[dc]; ok || dc == own {
			continue
		}
		if now.Sub(d.Seen) >= rpc.FederationMemory {
			delete(k.dc, dc)
			changed = true
			k.log.Info("datacenter forgotten: the WAN pool has not named it for a long time", logging.KeyDatacenter, dc)
			continue
		}
		view[dc] = slices.Clone(d.RPC)
	}
	if changed || now.Sub(k.saved) >= knownSaveEvery {
		if err := k.save(); err != nil {
			k.log.Warn("saving the known datacenters", logging.KeyError, err)
			return
		}
		k.saved = now
	}
}

// save writes the memory atomically and durably (atomicfile).
func (k *knownDatacenters) save() error {
	if k.path == "" {
		return nil
	}
	b, err := json.Marshal(k.dc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteBytes(k.path, b)
}
