package rpc

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/certs/certstest"
)

// fakeOperator answers every operator call; calls counts those that reached it.
type fakeOperator struct{ calls int }

func (f *fakeOperator) Members(context.Context) (*Members, error) { f.calls++; return &Members{}, nil }
func (f *fakeOperator) RemovePeer(_ context.Context, id string) (*PeerResult, error) {
	f.calls++
	return &PeerResult{Done: "removed " + id}, nil
}
func (f *fakeOperator) TransferLeader(context.Context, string) (*PeerResult, error) {
	f.calls++
	return &PeerResult{Done: "transferred"}, nil
}
func (f *fakeOperator) Snapshot(_ context.Context, w io.Writer) error {
	f.calls++
	_, err := w.Write([]byte("archive"))
	return err
}
func (f *fakeOperator) Restore(_ context.Context, r io.Reader) error {
	f.calls++
	_, err := io.Copy(io.Discard, r)
	return err
}
func (f *fakeOperator) Keyring(context.Context, KeyringRequest) (*Keyring, error) {
	f.calls++
	return &Keyring{}, nil
}

// operatorCalls are a restore and a peer removal, the two most destructive
// operator routes, plus the keyring list (what it reveals).
var operatorCalls = []struct{ method, path, body string }{
	{http.MethodPut, OperatorSnapshotPath, "archive"},
	{http.MethodPost, OperatorRemovePeerPath, `{"id":"m2"}`},
	{http.MethodGet, OperatorKeyringPath, ""},
}

// callOperator sends every operatorCalls request through hc and returns
// their statuses and the code of each error answer.
func callOperator(t *testing.T, hc *http.Client, base, operatorSecret string) (statuses []int, codes []Code) {
	t.Helper()
	for _, c := range operatorCalls {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		if operatorSecret != "" {
			req.Header.Set(OperatorSecretHeader, operatorSecret)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		var code Code
		if resp.StatusCode != http.StatusOK {
			code = decodeCode(b)
		}
		codes = append(codes, code)
	}
	return statuses, codes
}

func decodeCode(b []byte) Code {
	var e struct {
		Code Code `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Code
}

func allStatus(statuses []int, want int) bool {
	for _, s := range statuses {
		if s != want {
			return false
		}
	}
	return true
}

// A gate's credential (the cluster secret) gets 403 forbidden on the
// operator routes; the operator secret gets through, a wrong one does not.
func TestOperatorRoutesNeedTheOperatorSecret(t *testing.T) {
	const cluster, operator = "cluster-secret-0123456789", "operator-secret-0123456789"
	addr, srv := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: cluster})
	op := &fakeOperator{}
	MountOperator(srv.Mux(), op, OperatorAuth{Secret: operator}, nil)
	hc := &http.Client{Transport: WithSecret(NewTransport(), cluster)}
	defer hc.CloseIdleConnections()
	base := "http://" + addr

	for name, secret := range map[string]string{"the gate's credential": "", "a wrong operator secret": "operator-secret-0123456788"} {
		statuses, codes := callOperator(t, hc, base, secret)
		for i, c := range operatorCalls {
			if statuses[i] != http.StatusForbidden || codes[i] != CodeForbidden {
				t.Errorf("%s: %s %s answered %d %q, want 403 %s", name, c.method, c.path, statuses[i], codes[i], CodeForbidden)
			}
		}
	}
	if op.calls != 0 {
		t.Fatalf("%d operator calls reached the manager without the operator secret", op.calls)
	}
	// Reads stay open to the gate's credential.
	resp, err := hc.Get(base + "/rpc/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status with the gate's credential: %d", resp.StatusCode)
	}
	if statuses, _ := callOperator(t, hc, base, operator); !allStatus(statuses, http.StatusOK) || op.calls != len(operatorCalls) {
		t.Fatalf("with the operator secret: %v, %d calls served", statuses, op.calls)
	}
	// The operator secret does not replace the cluster secret.
	plain := &http.Client{Transport: NewTransport()}
	defer plain.CloseIdleConnections()
	if statuses, _ := callOperator(t, plain, base, operator); !allStatus(statuses, http.StatusUnauthorized) {
		t.Fatalf("the operator secret without the cluster secret: %v, want 401s", statuses)
	}
}

// Without an operator credential configured the operator routes are closed,
// unless the manager runs in insecure mode.
func TestOperatorRoutesClosedWithoutAnOperatorCredential(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth OperatorAuth
		want int
	}{
		{"closed", OperatorAuth{}, http.StatusForbidden},
		{"insecure mode", OperatorAuth{Insecure: true}, http.StatusOK},
	} {
		addr, srv := serveConfig(t, &fakeManager{leader: true}, ServerConfig{})
		MountOperator(srv.Mux(), &fakeOperator{}, tc.auth, nil)
		hc := &http.Client{Transport: NewTransport()}
		if statuses, _ := callOperator(t, hc, "http://"+addr, ""); !allStatus(statuses, tc.want) {
			t.Errorf("%s: %v, want %d", tc.name, statuses, tc.want)
		}
		hc.CloseIdleConnections()
	}
}

// Over mutual TLS with the operator's CA, a gate's certificate gets 403 on
// the operator routes and a certificate with the operator role's URI SAN gets
// through, unless certificates are not accepted (Certificates false, as on
// a manager whose CA is derived from the cluster secret).
func TestOperatorRoutesAcceptAnOperatorCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	issue := func(name string, spec certstest.Spec) *certs.Cluster {
		f := [3]string{filepath.Join(dir, "ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")}
		ca.WriteCA(t, f[0])
		ca.IssueFor(t, spec, f[1], f[2])
		c, err := certs.NewCluster(f[0], f[1], f[2], nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	role, _ := url.Parse(OperatorRoleURI)
	other, _ := url.Parse("spiffe://once/role/gate")
	server := issue("manager", certstest.Spec{Serial: 2, DNSNames: []string{certs.ServerName}, Server: true, Client: true})
	gate := issue("gate", certstest.Spec{Serial: 3, CommonName: "gate", Client: true, URIs: []*url.URL{other}})
	operator := issue("operator", certstest.Spec{Serial: 4, CommonName: "operator", Client: true, URIs: []*url.URL{role}})

	addr, srv := serveConfig(t, &fakeManager{leader: true}, ServerConfig{TLS: server.ServerConfig()})
	op := &fakeOperator{}
	MountOperator(srv.Mux(), op, OperatorAuth{Secret: "operator-secret-0123456789", Certificates: true}, nil)
	closedAddr, closedSrv := serveConfig(t, &fakeManager{leader: true}, ServerConfig{TLS: server.ServerConfig()})
	closedOp := &fakeOperator{}
	MountOperator(closedSrv.Mux(), closedOp, OperatorAuth{Secret: "operator-secret-0123456789"}, nil)
	client := func(c *certs.Cluster) *http.Client {
		t := NewTransport()
		t.TLSClientConfig = c.ClientConfig()
		return &http.Client{Transport: t}
	}
	base := "https://" + addr
	hc := client(gate)
	defer hc.CloseIdleConnections()
	if statuses, codes := callOperator(t, hc, base, ""); !allStatus(statuses, http.StatusForbidden) || codes[0] != CodeForbidden {
		t.Fatalf("a gate's certificate: %v %v, want 403 %s", statuses, codes, CodeForbidden)
	}
	oc := client(operator)
	defer oc.CloseIdleConnections()
	if statuses, _ := callOperator(t, oc, base, ""); !allStatus(statuses, http.StatusOK) || op.calls != len(operatorCalls) {
		t.Fatalf("an operator certificate: %v, %d calls served", statuses, op.calls)
	}
	if statuses, codes := callOperator(t, oc, "https://"+closedAddr, ""); !allStatus(statuses, http.StatusForbidden) || codes[0] != CodeForbidden || closedOp.calls != 0 {
		t.Fatalf("an operator certificate where certificates are not accepted: %v %v, %d calls served", statuses, codes, closedOp.calls)
	}
}

// On a listener whose CA is derived from the cluster secret, a certificate
// claiming the operator role (which any holder of the secret, every gate,
// can issue) is served as a cluster member and refused on the operator
// routes; the operator secret gets through.
func TestOperatorRoutesRefuseADerivedOperatorCertificate(t *testing.T) {
	const cluster, operator = "cluster-secret-0123456789", "operator-secret-0123456789"
	manager, err := certs.ClusterFromSecret(cluster, certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := certs.ClusterFromSecret(cluster, certs.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	addr, srv := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: cluster, TLS: manager.ServerConfig()})
	op := &fakeOperator{}
	// What a manager whose cluster TLS is derived from the secret mounts
	// (internal/manager, operatorAuth).
	MountOperator(srv.Mux(), op, OperatorAuth{Secret: operator}, nil)
	tr := NewTransport()
	tr.TLSClientConfig = forged.ClientConfig()
	hc := &http.Client{Transport: WithSecret(tr, cluster)}
	defer hc.CloseIdleConnections()
	base := "https://" + addr
	resp, err := hc.Get(base + "/rpc/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the status with a derived certificate and the cluster secret: %d", resp.StatusCode)
	}
	if statuses, codes := callOperator(t, hc, base, ""); !allStatus(statuses, http.StatusForbidden) || codes[0] != CodeForbidden || op.calls != 0 {
		t.Fatalf("a derived certificate claiming the operator role: %v %v, %d calls served", statuses, codes, op.calls)
	}
	if statuses, _ := callOperator(t, hc, base, operator); !allStatus(statuses, http.StatusOK) || op.calls != len(operatorCalls) {
		t.Fatalf("with the operator secret: %v, %d calls served", statuses, op.calls)
	}
}
