package membership

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/testutil"
)

// TestNameConflictIsLoggedWithTheSettings: a node that joins under a name a
// member at another address holds is kept out of the pool by memberlist;
// the member logs it as an error naming the two addresses and the settings
// that give the names (MANAGER_NODE_ID, GATE_NODE_NAME).
func TestNameConflictIsLoggedWithTheSettings(t *testing.T) {
	var logs testutil.Buffer
	holder := startPool(t, "twin", RoleManager, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	newcomer := startPool(t, "twin", RoleGate, func(c *Config) { c.Seeds = []string{holder.Addr()} })
	want := fmt.Sprintf("node=twin addr=%s role=gate peer=%s", newcomer.Addr(), holder.Addr())
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=ERROR") && strings.Contains(line, "MANAGER_NODE_ID") &&
				strings.Contains(line, "GATE_NODE_NAME") && strings.HasSuffix(line, want) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("an error naming MANAGER_NODE_ID and GATE_NODE_NAME, ending %q, in:\n%s", want, logs.String())
	})
}
