package rpc

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

// The federation view crosses the wire whole; a Server without one answers
// internal.
func TestFederationView(t *testing.T) {
	addr, srv := serveServer(t, &fakeManager{})
	c := newClient(t)
	if _, err := c.FederationOf(context.Background(), addr); !errors.Is(err, ErrInternal) {
		t.Fatalf("without a view: want %v, got %v", ErrInternal, err)
	}
	want := &Federation{Datacenter: "dc1", Datacenters: map[string][]string{"dc1": {"a:1", "b:1"}, "dc2": {"c:1"}}}
	srv.SetFederation(func() *Federation { return want })
	got, err := c.FederationOf(context.Background(), addr)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("view %+v, %v; want %+v", got, err, want)
	}
}
