package manager

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestNewRejectsTransportAtAnotherAddress(t *testing.T) {
	_, tr := raft.NewInmemTransport("")
	c := DefaultConfig()
	c.NodeID, c.DataDir = "m1", t.TempDir()
	c.RaftAdvertise = "127.0.0.1:1"
	if m, err := New(c, Deps{Transport: tr}); err == nil {
		m.Close()
		t.Fatal("New accepted a transport whose address is not RaftAdvertise")
	}
}
