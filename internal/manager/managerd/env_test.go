package managerd

import (
	"fmt"
	"testing"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/testutil"
)

// soloManagerEnv is the environment of one insecure manager that
// bootstraps alone on dataDir, with free Raft, RPC and gossip ports, and
// extra after them; rpcAddr is its RPC address.
func soloManagerEnv(t *testing.T, dataDir string, extra ...string) (env []string, rpcAddr string) {
	t.Helper()
	ports, err := testutil.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	rpcAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	env = []string{
		manager.EnvNodeID + "=m1",
		manager.EnvDataDir + "=" + dataDir,
		manager.EnvRaftAddr + fmt.Sprintf("=127.0.0.1:%d", ports[0]),
		manager.EnvRPCAddr + "=" + rpcAddr,
		manager.EnvGossipAddr + fmt.Sprintf("=127.0.0.1:%d", ports[2]),
		manager.EnvBootstrapExpect + "=1",
		manager.EnvInsecure + "=true",
	}
	return append(env, extra...), rpcAddr
}
