package rpc

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The federation view crosses the wire whole; a Server without one answers
// internal.
func TestFederationView(t *testing.T) {
	addr, srv := serveServer(t, &fakeManager{})
	c := newClient(t)
	if _, err := c.FederationOf(context.Background(), addr); !errors.Is(err, ErrInternal) {
		t.Fatalf("without a view: want %v, got %v", ErrInternal, err)
	}
	want := &rpcpb.FederationView{Datacenter: "dc1", Datacenters: map[string]*rpcpb.Managers{
		"dc1": {Addrs: []string{"a:1", "b:1"}}, "dc2": {Addrs: []string{"c:1"}}}}
	srv.SetFederation(func() *rpcpb.FederationView { return want })
	got, err := c.FederationOf(context.Background(), addr)
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("view %+v, %v; want %+v", got, err, want)
	}
}
