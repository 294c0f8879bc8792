package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
)

// TestMainHelp: -h lists every variable and exits 0.
func TestMainHelp(t *testing.T) {
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, nil, io.Discard, &stderr); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, env := range []string{EnvListenAddr, EnvDatacenter, EnvNodeName, EnvManagers, EnvTokenFile, EnvMaxBodyBytes,
		EnvForwardTimeout, EnvShutdownTimeout, EnvLogLevel, EnvLogFormat,
		"IDEMPOTENCY_PENDING_TTL_SECONDS", "IDEMPOTENCY_COMMITTED_TTL_SECONDS", "IDEMPOTENCY_REJECTED_TTL_SECONDS",
		"IDEMPOTENCY_MAX_ENTRIES", "IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS", "IDEMPOTENCY_WAIT_FOR_PENDING",
		"IDEMPOTENCY_PENDING_WAIT_TIMEOUT", EnvMaxTTL} {
		if !strings.Contains(stderr.String(), env) {
			t.Errorf("-h does not list %s", env)
		}
	}
}

// TestMainConfigErrors: a bad value stops the gate at start with exit code 2
// and a message naming the variable and the accepted range.
func TestMainConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"body too small", nil, []string{"GATE_MAX_BODY_BYTES=10"}, []string{"GATE_MAX_BODY_BYTES", "from 1024 to 8388608"}},
		{"forward timeout zero", nil, []string{"GATE_FORWARD_TIMEOUT_SECONDS=0"}, []string{"GATE_FORWARD_TIMEOUT_SECONDS", "from 0.1 to 600"}},
		{"forward timeout not seconds", nil, []string{"GATE_FORWARD_TIMEOUT_SECONDS=10s"}, []string{"GATE_FORWARD_TIMEOUT_SECONDS", "decimals allowed"}},
		{"max ttl", nil, []string{"IDEMPOTENCY_MAX_TTL_SECONDS=0.5"}, []string{"IDEMPOTENCY_MAX_TTL_SECONDS", "from 1 to 31536000"}},
		{"listen address", nil, []string{"GATE_LISTEN_ADDR=localhost"}, []string{"GATE_LISTEN_ADDR", "host:port"}},
		{"managers", nil, []string{"GATE_MANAGERS=127.0.0.1:7000,nohost"}, []string{"GATE_MANAGERS", "host:port"}},
		{"datacenter", nil, []string{"GATE_DATACENTER=dc/1"}, []string{"GATE_DATACENTER", "A-Z a-z 0-9"}},
		{"log level", nil, []string{"GATE_LOG_LEVEL=loud"}, []string{"GATE_LOG_LEVEL", "debug, info, warn, error"}},
		{"gossip advertise", nil, []string{"GATE_GOSSIP_ADVERTISE=0.0.0.0:7300"}, []string{"GATE_GOSSIP_ADVERTISE", "not 0.0.0.0"}},
		{"log format", nil, []string{"GATE_LOG_FORMAT=xml"}, []string{"GATE_LOG_FORMAT", "text or json"}},
		{"pending ttl", nil, []string{"IDEMPOTENCY_PENDING_TTL_SECONDS=soon"}, []string{"IDEMPOTENCY_PENDING_TTL_SECONDS", "from 0.1 to 2592000"}},
		{"wait for pending", nil, []string{"IDEMPOTENCY_WAIT_FOR_PENDING=maybe"}, []string{"IDEMPOTENCY_WAIT_FOR_PENDING", "true or false"}},
		{"max entries", nil, []string{"IDEMPOTENCY_MAX_ENTRIES=0"}, []string{"IDEMPOTENCY_MAX_ENTRIES", "from 1 to 100000000"}},
		{"token file", nil, []string{"GATE_TOKEN_FILE=/nonexistent/tokens"}, []string{"GATE_TOKEN_FILE", "<token> <tenant>"}},
		// Refused before anything binds (a gate that started would fail
		// with "address already in use", exit 1).
		{"gossip addr is listen addr", nil, []string{"GATE_LISTEN_ADDR=127.0.0.1:7300", "GATE_JOIN=127.0.0.1:7301"}, []string{"GATE_GOSSIP_ADDR", "GATE_LISTEN_ADDR", "127.0.0.1:7300"}},
		{"flag wins", []string{"-gate-max-body-bytes", "5"}, []string{"GATE_MAX_BODY_BYTES=2048"}, []string{"GATE_MAX_BODY_BYTES", "-gate-max-body-bytes"}},
		{"unknown flag", []string{"-nope"}, nil, []string{"nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			env := append([]string{"GATE_LISTEN_ADDR=127.0.0.1:0", "GATE_INSECURE=true"}, tt.env...)
			code := Main(context.Background(), tt.args, env, io.Discard, &stderr)
			if code != ExitConfig {
				t.Fatalf("exit %d, want %d; stderr: %s", code, ExitConfig, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not name %q", stderr.String(), w)
				}
			}
		})
	}
}

// logLines collects a process's JSON log lines (slog writes one record per
// Write) and reports the address of the "gate serving" line.
type logLines struct {
	mu    sync.Mutex
	lines []string
	addr  chan string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		l.lines = append(l.lines, line)
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gate serving" {
			select {
			case l.addr <- rec.Addr:
			default:
			}
		}
	}
	return len(p), nil
}

// TestMainServesAndStops: Main serves with the settings of its environment and
// returns 0 after a graceful shutdown when its context ends.
func TestMainServesAndStops(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	logs := &logLines{addr: make(chan string, 1)}
	defer func() {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, l := range logs.lines {
			t.Log(l)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	env := []string{"GATE_LISTEN_ADDR=127.0.0.1:0", "GATE_INSECURE=true", "GATE_MANAGERS=" + addr, "GATE_LOG_FORMAT=json",
		"GATE_NODE_NAME=main-test", "IDEMPOTENCY_PENDING_WAIT_TIMEOUT=2"}
	go func() { exit <- Main(ctx, nil, env, io.Discard, logs) }()

	var base string
	select {
	case a := <-logs.addr:
		base = "http://" + a
	case code := <-exit:
		t.Fatalf("Main exited %d before serving", code)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(`{"type":"demo","payload":{"n":1}}`))
	req.Header.Set("Idempotency-Key", skey(1))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // what curl -d sends
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: HTTP %d", resp.StatusCode)
	}
	// Ready once the federation read from the manager has formed.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("readyz: HTTP %d", resp.StatusCode)
	})
	tr.CloseIdleConnections()
	cancel()
	if code := <-exit; code != ExitOK {
		t.Fatalf("exit %d after shutdown", code)
	}
}

// TestMainWarnsOfUnknownVariables: a GATE_* or IDEMPOTENCY_* variable that
// neither daemon reads is logged as ignored, with the setting it misspells;
// the manager's variables, which one environment may hold for both, are not.
func TestMainWarnsOfUnknownVariables(t *testing.T) {
	logs := &logLines{addr: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	env := []string{"GATE_LISTEN_ADDR=127.0.0.1:0", "GATE_INSECURE=true", "GATE_LOG_FORMAT=json",
		"IDEMPOTENCY_COMMITED_TTL_SECONDS=5", "GATE_MAX_BODDY_BYTES=2048", // misspelled
		"IDEMPOTENCY_LEDGER_MAX_ENTRIES=10", "MANAGER_NODE_ID=m1"} // the manager's
	go func() { exit <- Main(ctx, nil, env, io.Discard, logs) }()
	select {
	case <-logs.addr:
	case code := <-exit:
		t.Fatalf("Main exited %d before serving", code)
	}
	cancel()
	if code := <-exit; code != ExitOK {
		t.Fatalf("exit %d after shutdown", code)
	}
	type warning struct {
		Variable   string `json:"variable"`
		DidYouMean string `json:"did_you_mean"`
	}
	var got []warning
	for _, line := range logs.lines {
		var rec struct {
			Msg string `json:"msg"`
			warning
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "unknown variable ignored" {
			got = append(got, rec.warning)
		}
	}
	want := []warning{
		{"GATE_MAX_BODDY_BYTES", EnvMaxBodyBytes},
		{"IDEMPOTENCY_COMMITED_TTL_SECONDS", config.EnvCommittedTTL},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings %+v, want %+v; logs:\n%s", got, want, strings.Join(logs.lines, "\n"))
	}
}

// TestLoadConfigAsOperatorsWriteIt: seconds with decimals and booleans in any
// of their usual spellings load; the flag wins over its variable.
func TestLoadConfigAsOperatorsWriteIt(t *testing.T) {
	tests := []struct {
		env   map[string]string
		args  []string
		check func(Config) bool
	}{
		{map[string]string{"IDEMPOTENCY_PENDING_TTL_SECONDS": "60.0"}, nil,
			func(c Config) bool { return c.Idempotency.PendingTTL == 60*time.Second }},
		{map[string]string{"IDEMPOTENCY_PENDING_TTL_SECONDS": "0.5"}, nil,
			func(c Config) bool { return c.Idempotency.PendingTTL == 500*time.Millisecond }},
		{map[string]string{"IDEMPOTENCY_WAIT_FOR_PENDING": "True"}, nil,
			func(c Config) bool { return c.Idempotency.WaitForPending }},
		{map[string]string{"IDEMPOTENCY_WAIT_FOR_PENDING": "on"}, []string{},
			func(c Config) bool { return c.Idempotency.WaitForPending }},
		{map[string]string{"IDEMPOTENCY_WAIT_FOR_PENDING": "on"}, []string{"-idempotency-wait-for-pending=OFF"},
			func(c Config) bool { return !c.Idempotency.WaitForPending }},
		{map[string]string{"GATE_FORWARD_TIMEOUT_SECONDS": "2.5", "GATE_PPROF": "Yes"}, nil,
			func(c Config) bool { return c.ForwardTimeout == 2500*time.Millisecond && c.Pprof }},
		{map[string]string{"IDEMPOTENCY_MAX_TTL_SECONDS": "86400.0"}, nil,
			func(c Config) bool { return c.MaxTTL == 24*time.Hour }},
		{nil, nil,
			func(c Config) bool { return c.MaxTTL == 30*24*time.Hour }},
	}
	for _, tt := range tests {
		c, err := LoadConfig(tt.args, config.MapLookup(tt.env), io.Discard)
		if err != nil {
			t.Fatalf("%v %v: %v", tt.env, tt.args, err)
		}
		if !tt.check(c) {
			t.Fatalf("%v %v: loaded %+v", tt.env, tt.args, c)
		}
	}
}

// TestMainStartsWithDecimalSeconds: IDEMPOTENCY_PENDING_TTL_SECONDS=60.0 and
// 0.5 (with IDEMPOTENCY_WAIT_FOR_PENDING=True) start the gate, which serves
// and then exits 0.
func TestMainStartsWithDecimalSeconds(t *testing.T) {
	for _, v := range []string{"60.0", "0.5"} {
		logs := &logLines{addr: make(chan string, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		exit := make(chan int, 1)
		env := []string{"GATE_LISTEN_ADDR=127.0.0.1:0", "GATE_INSECURE=true", "GATE_LOG_FORMAT=json",
			"IDEMPOTENCY_PENDING_TTL_SECONDS=" + v, "IDEMPOTENCY_WAIT_FOR_PENDING=True"}
		go func() { exit <- Main(ctx, nil, env, io.Discard, logs) }()
		select {
		case <-logs.addr:
		case code := <-exit:
			cancel()
			t.Fatalf("IDEMPOTENCY_PENDING_TTL_SECONDS=%s: Main exited %d before serving: %q", v, code, logs.lines)
		}
		cancel()
		if code := <-exit; code != ExitOK {
			t.Fatalf("IDEMPOTENCY_PENDING_TTL_SECONDS=%s: exit %d after shutdown", v, code)
		}
	}
}

// TestMainWarnsWithoutTokenFile: a gate started without GATE_TOKEN_FILE
// serves every caller as tenant "default", which it says at start with a
// warning naming the variable; a gate with a token file does not.
func TestMainWarnsWithoutTokenFile(t *testing.T) {
	tokens := writeFile(t, "tokens", "tok-alpha alpha\n")
	for _, tc := range []struct {
		env  []string
		want bool
	}{
		{nil, true},
		{[]string{EnvTokenFile + "=" + tokens}, false},
	} {
		logs := &logLines{addr: make(chan string, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		exit := make(chan int, 1)
		env := append([]string{"GATE_LISTEN_ADDR=127.0.0.1:0", "GATE_INSECURE=true", "GATE_LOG_FORMAT=json"}, tc.env...)
		go func() { exit <- Main(ctx, nil, env, io.Discard, logs) }()
		select {
		case <-logs.addr:
		case code := <-exit:
			cancel()
			t.Fatalf("%v: Main exited %d before serving", tc.env, code)
		}
		cancel()
		if code := <-exit; code != ExitOK {
			t.Fatalf("%v: exit %d after shutdown", tc.env, code)
		}
		warned := false
		for _, line := range logs.lines {
			var rec struct{ Level, Msg, Variable string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == noTokenFileWarning {
				warned = rec.Level == "WARN" && rec.Variable == EnvTokenFile
			}
		}
		if warned != tc.want {
			t.Errorf("%v: warned %v, want %v; logs:\n%s", tc.env, warned, tc.want, strings.Join(logs.lines, "\n"))
		}
	}
}
