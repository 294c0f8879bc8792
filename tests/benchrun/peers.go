package benchrun

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/loadgen"
)

// PeerWorkloads are the workloads `make bench-peers` runs against once and
// against the peer, in this order.
var PeerWorkloads = []string{WUniqueC64, WUniqueC512, WDuplicates}

// PeerBinary is the etcd member's executable in Options.BinDir, built from
// the tests/peers/etcd module (its own go.mod: the servers run with etcd's
// own dependency versions).
const PeerBinary = "oncepeer-etcd"

// PeersReport is `oncebench peers`: once's run and the peer's, and the
// ratios of the two, measured one after the other on one machine.
type PeersReport struct {
	Generated time.Time `json:"generated"`
	Command   []string  `json:"command,omitempty"`
	Once      Report    `json:"once"`
	Peer      PeerRun   `json:"peer"`
	// Rows compare each workload: once's figure over the peer's.
	Rows  []PeerRow `json:"rows"`
	Error string    `json:"error,omitempty"`
}

// PeerRun is the peer's side: etcd with three members, driven by the same
// load generator through etcdTransport.
type PeerRun struct {
	Name      string         `json:"name"`
	Members   int            `json:"members"`
	Workloads []PeerWorkload `json:"workloads"`
}

// PeerWorkload is one workload against the peer.
type PeerWorkload struct {
	Load loadgen.Result `json:"load"`
	// MembersUS is the members' CPU time per answered request, in
	// microseconds: the figure compared with once's gates and managers.
	// ClientUS is this process's (the load generator and the etcd client
	// library together), for comparison with once's load generator alone.
	MembersUS float64 `json:"members_cpu_us_per_request"`
	ClientUS  float64 `json:"client_cpu_us_per_request"`
}

// PeerRow is one workload's comparison.
type PeerRow struct {
	Workload    string  `json:"workload"`
	OnceRate    float64 `json:"once_ok_per_s"`
	PeerRate    float64 `json:"peer_ok_per_s"`
	RateRatio   float64 `json:"once_over_peer_rate"`
	OnceP99MS   float64 `json:"once_p99_ms"`
	PeerP99MS   float64 `json:"peer_p99_ms"`
	OnceCPUUS   float64 `json:"once_cpu_us_per_request"`
	PeerCPUUS   float64 `json:"peer_cpu_us_per_request"`
	OnceErrors  int64   `json:"once_non_2xx"`
	PeerErrors  int64   `json:"peer_non_2xx"`
	DuplicateOK bool    `json:"no_duplicate_jobs"`
}

// RunPeers runs the peer workloads against once (Run, with o) and then
// against etcd: three members started from o.BinDir/oncepeer-etcd, and the
// same load generator with the same specs, whose requests etcdTransport
// turns into etcd transactions in this process (what a client of a
// general-purpose store would run: no gate in between). It compares the
// two runs workload by workload.
func RunPeers(ctx context.Context, o Options) (rep PeersReport, err error) {
	o.setDefaults()
	if len(o.Workloads) == 0 || slices.Equal(o.Workloads, DefaultWorkloads) {
		o.Workloads = PeerWorkloads
	}
	rep.Generated = time.Now().UTC().Round(time.Second)
	bin := filepath.Join(o.BinDir, PeerBinary)
	if _, err := os.Stat(bin); err != nil {
		return rep, fmt.Errorf("%w: %v (make bench-peers builds it)", ErrBinaries, err)
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Progress, "oncebench peers: "+format+"\n", a...) }

	say("once: %s", strings.Join(o.Workloads, ", "))
	rep.Once, err = Run(ctx, o)
	if err != nil {
		return rep, fmt.Errorf("once: %w", err)
	}
	base := rep.Once.Cluster.BaseDir + "-etcd"
	say("etcd: starting 3 members in %s", base)
	p, err := startPeer(ctx, bin, base, 3)
	if err != nil {
		return rep, fmt.Errorf("etcd: %w", err)
	}
	defer func() {
		p.stop()
		if !o.KeepData {
			_ = os.RemoveAll(filepath.Join(base, "data"))
		}
	}()
	rep.Peer = PeerRun{Name: "etcd 3.6, 3 members, txn put-if-absent else read", Members: len(p.members)}
	// The members serve TLS with certificates they made themselves (etcd's
	// auto TLS): encrypted, as once's cluster is; not verified.
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}) //nolint:gosec // a benchmark against self-signed members on loopback
	if err != nil {
		return rep, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	tr := etcdTransport{kv: cli}
	if o.Warmup > 0 {
		if _, err := loadgen.Run(ctx, loadgen.Spec{Name: "warmup", Gates: etcdGates, Transport: tr, Keys: loadgen.KeysUnique,
			Concurrency: 32, Duration: loadgen.Duration(o.Warmup), ClientPrefix: "warmup"}); err != nil {
			return rep, fmt.Errorf("etcd warm-up: %w", err)
		}
	}
	for _, name := range o.Workloads {
		spec, err := workloadSpec(name, o, 0)
		if err != nil {
			return rep, err
		}
		spec.Gates, spec.Transport = etcdGates, tr
		say("etcd: %s", name)
		w, err := p.measure(ctx, spec)
		if err != nil {
			return rep, fmt.Errorf("etcd %s: %w", name, err)
		}
		rep.Peer.Workloads = append(rep.Peer.Workloads, w)
	}
	rep.Rows = compareRuns(rep.Once, rep.Peer)
	return rep, nil
}

// compareRuns pairs the workloads of the two runs by name.
func compareRuns(once Report, peer PeerRun) []PeerRow {
	var rows []PeerRow
	for _, pw := range peer.Workloads {
		ow := find(once, pw.Load.Name)
		if ow == nil {
			continue
		}
		r := PeerRow{Workload: pw.Load.Name,
			OnceRate: round(okRate(ow), 0), PeerRate: round(rateOK(pw.Load), 0),
			OnceP99MS: ms(ow.Load.Latency.P99US), PeerP99MS: ms(pw.Load.Latency.P99US),
			OnceCPUUS: ow.Cluster.CPUPerRequest.Once, PeerCPUUS: pw.MembersUS,
			OnceErrors: ow.Load.Answered - ow.Load.OK(), PeerErrors: pw.Load.Answered - pw.Load.OK(),
			DuplicateOK: ow.Load.KeysWithMultipleJobIDs == 0 && pw.Load.KeysWithMultipleJobIDs == 0}
		if r.PeerRate > 0 {
			r.RateRatio = round(r.OnceRate/r.PeerRate, 2)
		}
		rows = append(rows, r)
	}
	return rows
}

func rateOK(r loadgen.Result) float64 {
	if r.DurationSec <= 0 {
		return 0
	}
	return float64(r.OK()) / r.DurationSec
}

// WritePeersTable prints the comparison.
func WritePeersTable(w io.Writer, rep PeersReport) error {
	fmt.Fprintf(w, "once against %s, one run on %d CPUs (%s)\n\n", rep.Peer.Name, numCPU(rep.Once), rep.Once.Machine.CPUModel)
	fmt.Fprintf(w, "%-12s %10s %10s %8s %9s %9s %11s %11s %6s %6s %5s\n",
		"workload", "once 2xx/s", "etcd 2xx/s", "once÷etcd", "once p99", "etcd p99", "once µs/req", "etcd µs/req", "once!", "etcd!", "dups")
	for _, r := range rep.Rows {
		dups := "0"
		if !r.DuplicateOK {
			dups = "SOME"
		}
		fmt.Fprintf(w, "%-12s %10.0f %10.0f %8.2f× %7.1fms %7.1fms %11.0f %11.0f %6d %6d %5s\n",
			r.Workload, r.OnceRate, r.PeerRate, r.RateRatio, r.OnceP99MS, r.PeerP99MS, r.OnceCPUUS, r.PeerCPUUS, r.OnceErrors, r.PeerErrors, dups)
	}
	fmt.Fprintln(w, "\nµs/req: CPU time of the system's processes per answered request (once: gates and managers; etcd: its members).")
	fmt.Fprintln(w, "once!/etcd!: answers that were not 2xx. dups: keys answered with more than one job id (must be 0).")
	return nil
}

// peerProc is one process of the peer.
type peerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	line  chan string
}

type peer struct {
	members   []*peerProc
	endpoints []string
}

func startProc(ctx context.Context, bin, logPath string, args ...string) (*peerProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	logf.Close() // the child holds its own descriptor
	p := &peerProc{cmd: cmd, stdin: stdin, line: make(chan string, 1)}
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		p.line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return p, nil
}

// ready waits for the process's first line.
func (p *peerProc) ready(ctx context.Context, d time.Duration) (string, error) {
	select {
	case s := <-p.line:
		if s == "" {
			return "", errors.New("exited before it was ready (see its log)")
		}
		return s, nil
	case <-time.After(d):
		return "", fmt.Errorf("not ready within %s", d)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (p *peerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func startPeer(ctx context.Context, bin, base string, members int) (p *peer, err error) {
	for _, d := range []string{"logs", "data"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			return nil, err
		}
	}
	ports, err := testutil.FreePorts(2 * members)
	if err != nil {
		return nil, err
	}
	p = &peer{}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	var cluster, endpoints []string
	for i := range members {
		cluster = append(cluster, fmt.Sprintf("m%d=https://127.0.0.1:%d", i+1, ports[2*i+1]))
		endpoints = append(endpoints, fmt.Sprintf("https://127.0.0.1:%d", ports[2*i]))
	}
	for i := range members {
		name := fmt.Sprintf("m%d", i+1)
		m, err := startProc(ctx, bin, filepath.Join(base, "logs", name+".log"), "member", "-name", name,
			"-dir", filepath.Join(base, "data", name), "-client", endpoints[i],
			"-peer", fmt.Sprintf("https://127.0.0.1:%d", ports[2*i+1]), "-cluster", strings.Join(cluster, ","))
		if err != nil {
			return p, err
		}
		p.members = append(p.members, m)
	}
	for i, m := range p.members {
		if _, err := m.ready(ctx, 60*time.Second); err != nil {
			return p, fmt.Errorf("member m%d: %w", i+1, err)
		}
	}
	p.endpoints = endpoints
	return p, nil
}

func (p *peer) stop() {
	for _, m := range p.members {
		m.stop()
	}
}

// cpuTicks sums the processes' CPU time.
func cpuTicks(procs []*peerProc) (int64, error) {
	var sum int64
	for _, q := range procs {
		t, err := procCPU(q.cmd.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}

// measure runs one workload against the peer and its CPU around it.
func (p *peer) measure(ctx context.Context, spec loadgen.Spec) (PeerWorkload, error) {
	m0, err := cpuTicks(p.members)
	if err != nil {
		return PeerWorkload{}, err
	}
	c0, err := procCPU(0)
	if err != nil {
		return PeerWorkload{}, err
	}
	res, err := loadgen.Run(ctx, spec)
	if err != nil {
		return PeerWorkload{}, err
	}
	m1, err := cpuTicks(p.members)
	if err != nil {
		return PeerWorkload{}, err
	}
	c1, err := procCPU(0)
	if err != nil {
		return PeerWorkload{}, err
	}
	w := PeerWorkload{Load: res}
	if res.Answered > 0 {
		us := func(ticks int64) float64 {
			return round(float64(ticks)*1e6/clockTick/float64(res.Answered), 0)
		}
		w.MembersUS, w.ClientUS = us(m1-m0), us(c1-c0)
	}
	return w, nil
}

// etcdGates names the load generator's "gates" in an etcd run: its requests
// never leave the process (etcdTransport), but a spec needs URLs.
var etcdGates = []string{"http://etcd-a.invalid", "http://etcd-b.invalid"}

// etcdTransport answers the load generator's requests as a once gate would,
// from etcd, in this process: POST /v1/jobs with an Idempotency-Key is one
// transaction, put-if-absent of the key with the job (a job id derived from
// the key, and the request), and on conflict a read of the stored job in the
// same transaction. A new key is 201; a retry 200 with
// Idempotent-Replayed: true; another body under the key 422. GET (the
// load generator's health check) is 200.
type etcdTransport struct{ kv clientv3.KV }

func (t etcdTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	answer := func(status int, ctype string, body []byte, replayed string) *http.Response {
		h := http.Header{"Content-Type": {ctype}}
		if replayed != "" {
			h.Set(api.HeaderReplayed, replayed)
		}
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r}
	}
	if r.Method == http.MethodGet {
		return answer(http.StatusOK, "text/plain", nil, ""), nil
	}
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	key := r.Header.Get(api.HeaderIdempotencyKey)
	sum := sha256.Sum256([]byte(key))
	job := make([]byte, 0, len(body)+64)
	job = append(job, `{"job_id":"`...)
	job = hex.AppendEncode(job, sum[:16])
	job = append(job, `","request":`...)
	job = append(job, bytes.TrimSpace(body)...)
	job = append(job, "}\n"...)
	k := "/once/jobs/" + key
	resp, err := t.kv.Txn(r.Context()).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(job))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return answer(http.StatusCreated, api.ContentTypeJSON, job, "false"), nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 || !bytes.Equal(kvs[0].Value, job) {
		return answer(http.StatusUnprocessableEntity, "application/problem+json", []byte(`{"code":"idempotency_key_reused"}`), ""), nil
	}
	return answer(http.StatusOK, api.ContentTypeJSON, kvs[0].Value, "true"), nil
}
