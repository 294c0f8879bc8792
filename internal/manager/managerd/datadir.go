package managerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/manager"
)

// IdentityFile is the file, under MANAGER_DATA_DIR, naming the manager and
// the datacenter the directory belongs to. A Raft stable store holds a
// server's term and vote and its log holds a group's entries: started as
// another node, or in another datacenter, a manager would vote twice in a
// term or mix two datacenters' ledgers. etcd refuses a member whose data
// directory names another member; Consul keeps node-id in its data
// directory.
const IdentityFile = "identity.json"

// DataDirIdentity is the content of IdentityFile.
type DataDirIdentity struct {
	NodeID     string `json:"node_id"`
	Datacenter string `json:"datacenter"`
}

// ForeignDataDirError refuses a start on a data directory whose identity
// file names another node or datacenter than the configuration. It matches
// config.ErrInvalid: the configuration does not fit the directory (exit 2).
type ForeignDataDirError struct {
	Path       string          // the identity file
	Found      DataDirIdentity // what it holds
	Configured DataDirIdentity // what the configuration says
}

func (e *ForeignDataDirError) Error() string {
	return fmt.Sprintf("data directory belongs to another manager: %s names node %q of datacenter %q, the configuration "+
		"node %q (%s) of datacenter %q (%s). Fix the configuration if it is the one that is wrong; if not, point %s "+
		"at this manager's own directory, or start it on an empty one (a manager moved to another node or datacenter "+
		"is a new member: remove the old one with oncectl raft remove-peer)",
		e.Path, e.Found.NodeID, e.Found.Datacenter, e.Configured.NodeID, manager.EnvNodeID,
		e.Configured.Datacenter, manager.EnvDatacenter, manager.EnvDataDir)
}

// Unwrap lets errors.Is match config.ErrInvalid.
func (e *ForeignDataDirError) Unwrap() error { return config.ErrInvalid }

// IdentityFileError refuses a start on a data directory whose identity file
// cannot be read or does not decode. The file is left as it is: whose the
// directory is cannot be told any more, and a guess could be the wrong one.
type IdentityFileError struct {
	Path string
	Err  error
}

func (e *IdentityFileError) Error() string {
	return fmt.Sprintf("data directory identity %s unreadable: %v; it was left as it is. If the directory is this "+
		"manager's, remove the file (the next start writes it again); if not, start the manager on an empty data directory",
		e.Path, e.Err)
}

func (e *IdentityFileError) Unwrap() error { return e.Err }

// errIdentityIncomplete: the file decodes but lacks a field.
var errIdentityIncomplete = errors.New("node_id or datacenter missing")

// claimDataDir checks that cfg.DataDir is this manager's: an identity file
// naming cfg's node and datacenter goes on, one naming another refuses
// (ForeignDataDirError), one that cannot be read refuses and is left as it
// is (IdentityFileError). An absent one is written: the directory is new, or
// was written by a build before the file existed and is adopted. manager.New
// calls it under the data directory's lock (Deps.ClaimDataDir).
func claimDataDir(cfg manager.Config, log *slog.Logger) error {
	path := filepath.Join(cfg.DataDir, IdentityFile)
	want := DataDirIdentity{NodeID: cfg.NodeID, Datacenter: cfg.Datacenter}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return writeIdentity(path, want, cfg.DataDir, log)
	}
	if err != nil {
		return &IdentityFileError{Path: path, Err: err}
	}
	var got DataDirIdentity
	if err := json.Unmarshal(b, &got); err != nil {
		return &IdentityFileError{Path: path, Err: err}
	}
	if got.NodeID == "" || got.Datacenter == "" {
		return &IdentityFileError{Path: path, Err: errIdentityIncomplete}
	}
	if got != want {
		return &ForeignDataDirError{Path: path, Found: got, Configured: want}
	}
	return nil
}

// writeIdentity writes the identity file of a directory that has none, and
// logs whether the directory was new or adopted (it has a Raft stable store:
// a manager of an earlier build ran there).
func writeIdentity(path string, id DataDirIdentity, dataDir string, log *slog.Logger) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write data directory identity %s: %w", path, err)
	}
	msg := "data directory identity written"
	if _, err := os.Stat(filepath.Join(dataDir, "raft", "stable.db")); err == nil {
		msg = "data directory identity written: a directory of a build before the file is adopted"
	}
	log.Info(msg, logging.KeyFile, path, logging.KeyNodeID, id.NodeID, logging.KeyDatacenter, id.Datacenter)
	return nil
}
