package managerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

// The memory of other datacenters survives a restart: a view merged after
// reloading the file names dc2 with its last addresses although the pool
// does not; a datacenter known with no alive manager keeps its last
// addresses in the file while the view says it has none; one not named for
// rpc.FederationMemory is forgotten; a file that cannot be read is an error.
func TestKnownDatacentersSurviveRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), knownDatacentersFile)
	now := time.Unix(1_800_000_000, 0)
	k, err := loadKnownDatacenters(path, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	k.merge(map[string][]string{"dc1": {"a:1"}, "dc2": {"b:1", "b:2"}, "dc3": {"c:1"}}, "dc1", now)

	now = now.Add(time.Minute)
	view := map[string][]string{"dc1": {"a:1"}, "dc3": {}} // dc3's managers all down
	k.merge(view, "dc1", now)
	if got := fmt.Sprint(view); got != "map[dc1:[a:1] dc2:[b:1 b:2] dc3:[]]" {
		t.Fatalf("view %s", got)
	}

	restarted, err := loadKnownDatacenters(path, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	view = map[string][]string{"dc1": {"a:1"}} // a restarted manager's pool: no one else yet
	restarted.merge(view, "dc1", now.Add(time.Second))
	if got := fmt.Sprint(view); got != "map[dc1:[a:1] dc2:[b:1 b:2] dc3:[c:1]]" {
		t.Fatalf("view after a restart %s", got)
	}

	view = map[string][]string{"dc1": {"a:1"}, "dc3": {"c:9"}}
	restarted.merge(view, "dc1", now.Add(rpc.FederationMemory))
	if got := fmt.Sprint(view); got != "map[dc1:[a:1] dc3:[c:9]]" {
		t.Fatalf("view after rpc.FederationMemory %s", got)
	}
	again, err := loadKnownDatacenters(path, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(again.dc); got != fmt.Sprintf("map[dc3:{%v [c:9]}]", now.Add(rpc.FederationMemory)) {
		t.Fatalf("file after forgetting dc2 %s", got)
	}

	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var syn *json.SyntaxError
	if _, err := loadKnownDatacenters(path, testutil.Logger(t)); !errors.As(err, &syn) {
		t.Fatalf("a damaged file: %v, want a *json.SyntaxError", err)
	}
}
