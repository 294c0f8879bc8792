package benchrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// ceilingBody is the bare handler's answer: a job-sized JSON body (about 300
// bytes, shaped like a gate's 201) that is the same for every request.
var ceilingBody = []byte(`{"job_id":"job-0123456789abcdef0123456789abcdef","status":"committed",` +
	`"type":"bench","payload":{"n":1,"note":"the ceiling workload: a bare net/http handler, no gate, no manager"},` +
	`"datacenters":["dc1"],"created_at":"2026-01-01T00:00:00Z","committed_at":"2026-01-01T00:00:00Z"}` + "\n")

// ceilingHandler reads each request's body and answers 201 with ceilingBody:
// what loopback HTTP costs with no once code in the path.
func ceilingHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the load generator's /healthz check
			w.WriteHeader(http.StatusOK)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set(api.HeaderReplayed, "false")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(ceilingBody)
	})
}

// ceilingChildEnv makes the oncebench binary (or a test binary of this
// package) serve the ceiling handler instead of doing anything else: the
// ceiling server runs in a process of its own, so that its CPU time is
// measured apart from the load generator's, as a gate's is.
const ceilingChildEnv = "ONCEBENCH_CEILING_SERVER"

// ServeCeilingIfChild serves the ceiling handler and exits when the process
// was started as the ceiling server (by startCeiling); otherwise it returns
// at once. Programs that run benchmarks (oncebench, this package's tests)
// call it first thing in main / TestMain.
//
// The child listens on 127.0.0.1:0, writes "listening <url>" on stdout, and
// serves until its stdin is closed (the parent is done or gone).
func ServeCeilingIfChild() {
	if os.Getenv(ceilingChildEnv) != "1" {
		return
	}
	os.Exit(serveCeiling(os.Stdin, os.Stdout))
}

func serveCeiling(stdin io.Reader, stdout io.Writer) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stdout, "error", err)
		return 1
	}
	srv := &http.Server{Handler: ceilingHandler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintln(stdout, "listening", "http://"+ln.Addr().String())
	_, _ = io.Copy(io.Discard, stdin) // until the parent closes it
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return 1
	}
	return 0
}

// ceilingServer is the ceiling handler in a child process.
type ceilingServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
}

func (c *ceilingServer) pid() int { return c.cmd.Process.Pid }

// startCeiling starts this executable as the ceiling server and waits for
// its URL.
func startCeiling() (*ceilingServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("ceiling server: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ceilingChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ceiling server: %w", err)
	}
	c := &ceilingServer{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		url, ok := strings.CutPrefix(s, "listening ")
		if !ok {
			_ = c.close()
			return nil, fmt.Errorf("ceiling server: did not start: %q", s)
		}
		c.url = url
		return c, nil
	case <-time.After(10 * time.Second):
		_ = c.close()
		return nil, errors.New("ceiling server: no address within 10s")
	}
}

// close stops the child: its stdin closes, it shuts its server down and
// exits; one that does not within 5 s is killed.
func (c *ceilingServer) close() error {
	_ = c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("ceiling server: %w", err)
		}
		return nil
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
		return errors.New("ceiling server: killed after not exiting within 5s")
	}
}

// setCeilingRatios stamps every workload with its req/s as a fraction of the
// ceiling workload's of the same run (nothing when no ceiling ran).
func setCeilingRatios(rep *Report) {
	c := find(*rep, WCeiling)
	if c == nil || c.Load.RequestsPerSec <= 0 {
		return
	}
	rep.CeilingReqPerSec = c.Load.RequestsPerSec
	for i := range rep.Workloads {
		w := &rep.Workloads[i]
		if w.Load.Name != WCeiling {
			w.CeilingRatio = round(w.Load.RequestsPerSec/c.Load.RequestsPerSec, 3)
		}
	}
}

// isCeiling reports whether a workload runs against the bare handler.
func isCeiling(name string) bool { return strings.EqualFold(name, WCeiling) }
