// Package deploy holds the container tests of deploy/: real images, real
// Docker networks. They need a Docker engine and docker-compose, so they run
// only when ONCE_DEPLOY_TEST=1 (make deploy-test-multidc), not in make test.
package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// project is the compose project of the test: its own networks (on their
// own subnets) and volumes, its gates on ports Docker picks, so it does not
// disturb a stack started from deploy/compose.multidc.yaml with the defaults.
const project = "oncemdctest"

var (
	dcs      = []string{"dc1", "dc2"}
	services = map[string][]string{
		"dc1": {"dc1-manager1", "dc1-manager2", "dc1-manager3", "dc1-gate1", "dc1-gate2"},
		"dc2": {"dc2-manager1", "dc2-manager2", "dc2-manager3", "dc2-gate1", "dc2-gate2"},
	}
	// wanIP is each container's fixed address on the wan network
	// (compose.multidc.yaml with ONCE_WAN below): reconnected with it, since
	// the managers' WAN gossip is bound to it.
	wanIP = map[string]string{
		"dc1-manager1": ".11", "dc1-manager2": ".12", "dc1-manager3": ".13",
		"dc2-manager1": ".21", "dc2-manager2": ".22", "dc2-manager3": ".23",
		"dc1-gate1": ".31", "dc1-gate2": ".32", "dc2-gate1": ".41", "dc2-gate2": ".42",
	}
)

const wanNet = "172.29.93"

type stack struct {
	t    *testing.T
	file string
	env  []string
}

func (s *stack) compose(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-p", project, "-f", s.file}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// container returns the id of a service's container.
func (s *stack) container(ctx context.Context, service string) string {
	out, err := s.compose(ctx, "ps", "-q", service)
	id := strings.TrimSpace(out)
	if err != nil || id == "" {
		s.t.Fatalf("no container for %s: %v %s", service, err, out)
	}
	return id
}

// gateURL returns the base URL of a gate's published port.
func (s *stack) gateURL(ctx context.Context, service string) string {
	out, err := docker(ctx, "port", s.container(ctx, service), "8080/tcp")
	if err != nil {
		s.t.Fatalf("docker port %s: %v %s", service, err, out)
	}
	return "http://" + strings.TrimSpace(strings.Split(out, "\n")[0])
}

// submission is what one key's client saw.
type submission struct {
	key      string
	acked    string   // the job id of a 200/201, "" when never acknowledged
	answers  []string // the job ids of every 200/201 answer
	refusals int      // answers worth a retry (503, 409, no answer)
	gaveUp   bool
}

// TestMultiDatacenterWANPartition runs deploy/compose.multidc.yaml, submits
// jobs for ["dc1","dc2"] through the gates of both datacenters, cuts the WAN
// network off dc2 (docker network disconnect) under that load, heals it, and
// checks: no datacenter holds two jobs of one key; every answer for a key
// carries one job id; every job admitted in either datacenter — acknowledged
// or not, retried by its client or abandoned — is in both after healing, with
// the same id.
func TestMultiDatacenterWANPartition(t *testing.T) {
	if os.Getenv("ONCE_DEPLOY_TEST") != "1" {
		t.Skip("container test: set ONCE_DEPLOY_TEST=1 (make deploy-test-multidc); needs Docker and docker-compose")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	s := &stack{t: t, file: filepath.Join(root, "deploy", "compose.multidc.yaml"),
		env: append(os.Environ(), "ONCE_NET1=172.29.91", "ONCE_NET2=172.29.92", "ONCE_WAN="+wanNet, "ONCE_TAG=dev",
			"ONCE_DC1_GATE1_PORT=", "ONCE_DC1_GATE2_PORT=", "ONCE_DC2_GATE1_PORT=", "ONCE_DC2_GATE2_PORT=",
			"ONCE_DC1_RPC1_PORT=", "ONCE_DC1_RPC2_PORT=", "ONCE_DC1_RPC3_PORT=",
			"ONCE_DC2_RPC1_PORT=", "ONCE_DC2_RPC2_PORT=", "ONCE_DC2_RPC3_PORT=")}
	if os.Getenv("ONCE_TEST_SKIP_BUILD") != "1" {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy", "build.sh"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deploy/build.sh: %v\n%s", err, out)
		}
	}
	_, _ = s.compose(ctx, "down", "-v", "--remove-orphans") // an interrupted run's leftovers
	if out, err := s.compose(ctx, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		if t.Failed() {
			out, _ := s.compose(cctx, "logs", "--no-color", "--tail=40")
			t.Logf("logs:\n%s", out)
		}
		if out, err := s.compose(cctx, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})

	gates := map[string][]string{}
	for _, dc := range dcs {
		for _, svc := range services[dc] {
			if strings.Contains(svc, "gate") {
				gates[dc] = append(gates[dc], s.gateURL(ctx, svc))
			}
		}
	}
	hc := &http.Client{Timeout: 15 * time.Second}
	// Ready: every gate serves, and reads dc2 and dc1 through the federation.
	for _, dc := range dcs {
		for _, g := range gates[dc] {
			for _, other := range dcs {
				waitFor(t, ctx, 3*time.Minute, func() (bool, string) {
					st, body, err := get(ctx, hc, g+"/v1/jobs?limit=1&datacenter="+other)
					return err == nil && st == http.StatusOK, fmt.Sprintf("%s reading %s: %d %v %s", g, other, st, err, body)
				})
			}
		}
	}
	all := append(append([]string(nil), gates["dc1"]...), gates["dc2"]...)
	run := make([]byte, 4)
	_, _ = rand.Read(run)
	prefix := "wan-" + hex.EncodeToString(run)

	// The load: 24 clients, each submitting keys in turn through the gates of
	// both datacenters. A client retries its key through the next gate until
	// acknowledged (up to 90 s), except every third key, which it abandons
	// after its first refusal: the outbox alone must finish those.
	var (
		mu   sync.Mutex
		subs []*submission
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sub := &submission{key: fmt.Sprintf("%s-%d-%d", prefix, w, i)}
				giveUp := i%3 == 2
				deadline := time.Now().Add(90 * time.Second)
				for a := 0; ctx.Err() == nil && time.Now().Before(deadline); a++ {
					id, final := submit(ctx, hc, all[(w+i+a)%len(all)], sub.key)
					if id != "" {
						sub.answers = append(sub.answers, id)
						sub.acked = id
					}
					if final {
						break
					}
					sub.refusals++
					if giveUp {
						sub.gaveUp = true
						break
					}
					sleepCtx(ctx, 200*time.Millisecond)
				}
				mu.Lock()
				subs = append(subs, sub)
				mu.Unlock()
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()

	sleepCtx(ctx, 5*time.Second)
	netName := project + "_wan"
	t.Logf("partition: disconnecting dc2 from %s", netName)
	for _, svc := range services["dc2"] {
		if out, err := docker(ctx, "network", "disconnect", "-f", netName, s.container(ctx, svc)); err != nil {
			t.Fatalf("disconnect %s: %v %s", svc, err, out)
		}
	}
	sleepCtx(ctx, 20*time.Second)
	t.Log("heal: reconnecting dc2")
	for _, svc := range services["dc2"] {
		if out, err := docker(ctx, "network", "connect", "--ip", wanNet+wanIP[svc], netName, s.container(ctx, svc)); err != nil {
			t.Fatalf("connect %s: %v %s", svc, err, out)
		}
	}
	sleepCtx(ctx, 10*time.Second)
	stopLoad()

	mu.Lock()
	defer mu.Unlock()
	var acked, abandoned, refused int
	for _, sub := range subs {
		if sub.acked != "" {
			acked++
		}
		if sub.gaveUp {
			abandoned++
		}
		if sub.refusals > 0 {
			refused++
		}
		for _, id := range sub.answers {
			if id != sub.acked {
				t.Errorf("key %s: answers carry job ids %v", sub.key, sub.answers)
				break
			}
		}
	}
	t.Logf("%d keys submitted, %d acknowledged, %d refused at least once, %d abandoned after a refusal",
		len(subs), acked, refused, abandoned)
	if acked == 0 {
		t.Fatal("no submission was acknowledged")
	}
	if abandoned == 0 {
		t.Fatal("no submission was refused and abandoned: the partition did not cut the datacenters apart")
	}

	// After healing, every datacenter converges: each key of the run that is
	// in either datacenter is in both, once, with one id.
	var last string
	ok := waitUntil(ctx, 3*time.Minute, func() bool {
		copies := map[string]map[string][]string{} // dc → key → job ids
		for _, dc := range dcs {
			jobs, err := listJobs(ctx, hc, gates[dc][0], dc, prefix)
			if err != nil {
				last = err.Error()
				return false
			}
			copies[dc] = jobs
		}
		var problems []string
		keys := map[string]bool{}
		for _, dc := range dcs {
			for k, ids := range copies[dc] {
				keys[k] = true
				if len(ids) > 1 {
					problems = append(problems, fmt.Sprintf("DUPLICATE %s in %s: %v", k, dc, ids))
				}
			}
		}
		for k := range keys {
			a, b := copies["dc1"][k], copies["dc2"][k]
			if len(a) == 0 || len(b) == 0 || a[0] != b[0] {
				problems = append(problems, fmt.Sprintf("%s: dc1 %v, dc2 %v", k, a, b))
			}
		}
		for _, sub := range subs {
			if sub.acked != "" && !slices.Equal(copies["dc1"][sub.key], []string{sub.acked}) {
				problems = append(problems, fmt.Sprintf("acknowledged %s (%s) is %v in dc1, %v in dc2",
					sub.key, sub.acked, copies["dc1"][sub.key], copies["dc2"][sub.key]))
			}
		}
		carried := 0 // abandoned keys a datacenter admitted: the outbox, not the client, completed them
		for _, sub := range subs {
			if sub.gaveUp && keys[sub.key] {
				carried++
			}
		}
		last = fmt.Sprintf("%d keys in the datacenters (%d of them abandoned by their client); %d problems: %s",
			len(keys), carried, len(problems), strings.Join(first(problems, 10), "; "))
		t.Log(last)
		for _, p := range problems {
			if strings.HasPrefix(p, "DUPLICATE") {
				t.Fatal(p) // never heals by waiting
			}
		}
		return len(problems) == 0
	})
	if !ok {
		t.Fatalf("the datacenters did not converge after healing: %s", last)
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// submit posts key once through gate: the job id of a 200/201 (final), or
// "" with final false for an answer worth retrying (503, 409 in progress, a
// connection error). Any other answer fails the key for good.
func submit(ctx context.Context, hc *http.Client, gate, key string) (id string, final bool) {
	body := `{"type":"wan_test","payload":{"key":"` + key + `"},"datacenters":["dc1","dc2"]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gate+"/v1/jobs", strings.NewReader(body))
	if err != nil {
		return "", true
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderIdempotencyKey, key)
	resp, err := hc.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated:
		var j api.Job
		if json.Unmarshal(b, &j) != nil {
			return "", false
		}
		return j.JobID, true
	case http.StatusServiceUnavailable, http.StatusConflict, http.StatusTooManyRequests, http.StatusGatewayTimeout, http.StatusBadGateway:
		return "", false
	}
	return "", true
}

// listJobs reads every job of datacenter dc whose key starts with prefix:
// key → job ids.
func listJobs(ctx context.Context, hc *http.Client, gate, dc, prefix string) (map[string][]string, error) {
	out := map[string][]string{}
	after := ""
	for {
		q := url.Values{"limit": {"500"}, "datacenter": {dc}}
		if after != "" {
			q.Set("after", after)
		}
		st, body, err := get(ctx, hc, gate+"/v1/jobs?"+q.Encode())
		if err != nil || st != http.StatusOK {
			return nil, fmt.Errorf("listing %s through %s: %d %v %s", dc, gate, st, err, body)
		}
		var l api.JobList
		if err := json.Unmarshal(body, &l); err != nil {
			return nil, err
		}
		for _, j := range l.Jobs {
			if strings.HasPrefix(j.IdempotencyKey, prefix) {
				out[j.IdempotencyKey] = append(out[j.IdempotencyKey], j.JobID)
			}
		}
		if l.Next == nil || *l.Next == "" {
			return out, nil
		}
		after = *l.Next
	}
}

func get(ctx context.Context, hc *http.Client, u string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, bytes.TrimSpace(b), err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitUntil polls cond every second until it holds (true) or timeout or ctx
// ends (false).
func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var why string
	if !waitUntil(ctx, timeout, func() bool { ok, w := cond(); why = w; return ok }) {
		t.Fatal(errors.New(why))
	}
}
