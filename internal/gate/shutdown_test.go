package gate

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
)

// A gate told to stop with a shutdown delay serves on through it, /readyz
// 503 at once (a load balancer takes it out of rotation) and each answer
// closing its connection (clients reconnect, to another gate); Close ends
// the delay, and the gate then stops as without one.
func TestShutdownDelayServesWithReadyz503(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.ShutdownDelay = time.Hour })
	t.Cleanup(func() { g.Close() }) // runs before startGate's: ends the delay on failure
	if r := g.get(t, "/readyz"); r.status != http.StatusOK {
		t.Fatalf("readyz before the stop: %s", r)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- g.stop() }()
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		r, err := g.try(http.MethodGet, "/readyz", nil)
		return err == nil && r.status == http.StatusServiceUnavailable, fmt.Sprintf("readyz 503 while stopping: %v %v", r, err)
	})
	wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	// On a connection of its own: the answer says it closes it.
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: gate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("an answer in the shutdown delay: %d, closes the connection %v; want 200 and true", resp.StatusCode, resp.Close)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned within the delay: %v", err)
	default:
	}
	g.Close()
	if err := <-stopped; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
