package faultnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// tcpLayer is a bare raft.StreamLayer over loopback TCP for the tests (the
// manager's own layer is unexported).
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(a), timeout)
}

func listen(t *testing.T) *Layer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Wrap(tcpLayer{ln})
	t.Cleanup(func() { l.Close() })
	return l
}

func TestBlockRefusesAndClosesAndHeals(t *testing.T) {
	a, b := listen(t), listen(t)
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := b.Accept()
			if err != nil {
				accepted <- err
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	target := b.Addr().String()
	c, err := a.Dial(raft.ServerAddress(target), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.Block([]string{target})
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("write on a connection to a blocked peer must fail: it was closed")
	}
	if _, err := a.Dial(raft.ServerAddress(target), time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("want ErrBlocked, got %v", err)
	}
	if got := a.Blocked(); len(got) != 1 || got[0] != target {
		t.Fatalf("Blocked() = %v", got)
	}
	a.Block(nil)
	c2, err := a.Dial(raft.ServerAddress(target), time.Second)
	if err != nil {
		t.Fatalf("healed dial: %v", err)
	}
	c2.Close()
	b.Close()
	<-accepted
}

func TestCloseClosesDialedConnections(t *testing.T) {
	a, b := listen(t), listen(t)
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := b.Accept()
		if err == nil {
			acc <- c
		}
		close(acc)
	}()
	out, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in := <-acc
	if in == nil {
		t.Fatal("no accepted connection")
	}
	defer in.Close()
	a.Close()
	if _, err := out.Write([]byte("x")); err == nil {
		t.Fatal("dialed connection still open after Close")
	}
	_ = in.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Fatal("peer did not see the connection close")
	}
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); err == nil {
		t.Fatal("dial after Close must fail")
	}
}

func TestClockOffset(t *testing.T) {
	var c Clock
	if d := c.Now().Sub(time.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("zero offset: clock is %v off", d)
	}
	c.SetOffset(10 * time.Minute)
	if d := c.Now().Sub(time.Now()); d < 9*time.Minute || d > 11*time.Minute {
		t.Fatalf("offset 10m: clock is %v off", d)
	}
	c.SetOffset(-10 * time.Minute)
	if d := c.Now().Sub(time.Now()); d > -9*time.Minute || d < -11*time.Minute {
		t.Fatalf("offset -10m: clock is %v off", d)
	}
}

func TestClockEndpoint(t *testing.T) {
	var c Clock
	mux := http.NewServeMux()
	Mount(mux, nil, nil, &c)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	put := func(body string) (int, map[string]string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/debug/failpoints/clock", bytes.NewBufferString(body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, out := put(`{"offset":"-90s"}`); code != http.StatusOK || out["offset"] != "-1m30s" {
		t.Fatalf("PUT -90s: %d %v", code, out)
	}
	if c.Offset() != -90*time.Second {
		t.Fatalf("offset %v, want -90s", c.Offset())
	}
	if code, _ := put(`{"offset":"soon"}`); code != http.StatusBadRequest {
		t.Fatalf("PUT soon: %d, want 400", code)
	}
	if c.Offset() != -90*time.Second {
		t.Fatalf("a refused PUT changed the offset to %v", c.Offset())
	}
}
