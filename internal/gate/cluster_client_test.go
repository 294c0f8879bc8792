package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// TestClusterThroughTheGoClient: pkg/client's Cluster reads GET /v1/cluster
// of a real gate and manager with an operator's token into api.Cluster; the
// type holds every member the gate sends (decoded strictly, it encodes back
// to the same JSON); a tenant's token is ErrUnauthorized.
func TestClusterThroughTheGoClient(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tenant-secret-token-1 acme\n")
	operators := writeFile(t, "operators", "operator-secret-token-9 alice\n")
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.TokenFile, cfg.OperatorTokenFile = tenants, operators
	})
	wantJob(t, tg.submit(t, skey(1), `{"type":"x"}`, "Authorization", "Bearer tenant-secret-token-1"), http.StatusCreated)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	op, err := client.New([]string{tg.URL}, client.Options{Token: "operator-secret-token-9", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	v, err := op.Cluster(ctx)
	if err != nil {
		t.Fatalf("Cluster: %v", err)
	}
	l := v.Leader
	if v.Datacenter != "dc1" || v.Gate != "test-gate" || l == nil || l.NodeID != "m1" || !l.IsLeader || l.Term == 0 ||
		l.Queues == nil || l.Queues.Queued != 1 || l.Budgets == nil || l.Budgets.Queued != 1 || l.Budgets.MaxEntries == 0 {
		t.Fatalf("view %+v, leader %+v", v, l)
	}
	if len(v.Managers) != 1 || v.Managers[0].Addr != addr || v.Managers[0].Status == nil || v.Managers[0].Status.NodeID != "m1" ||
		len(v.Gates) != 1 || v.Gates[0].Name != "test-gate" || v.Gates[0].State != "alive" ||
		len(v.Datacenters) != 1 || v.Datacenters[0].Name != "dc1" || v.Datacenters[0].Leader == nil {
		t.Fatalf("view %+v", v)
	}

	// Every member the gate sends has its place in api.Cluster.
	res := tg.get(t, "/v1/cluster", "Authorization", "Bearer operator-secret-token-9")
	wantStatus(t, res, http.StatusOK)
	var strict api.Cluster
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("api.Cluster lacks a member of the gate's answer: %v\n%s", err, res.body)
	}
	again, err := json.Marshal(strict)
	if err != nil {
		t.Fatal(err)
	}
	var sent, kept any
	decodeJSON(t, res.body, &sent)
	decodeJSON(t, again, &kept)
	if !reflect.DeepEqual(sent, kept) {
		t.Fatalf("api.Cluster does not carry the gate's answer as it is:\n%s\n%s", res.body, again)
	}

	tenant, err := client.New([]string{tg.URL}, client.Options{Token: "tenant-secret-token-1", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.Cluster(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("Cluster with a tenant's token: %v, want ErrUnauthorized", err)
	}
}
