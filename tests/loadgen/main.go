package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/once-dev/once/internal/config"
)

// Report is the JSON document oncebench writes: the results and the machine
// they were measured on.
type Report struct {
	Generated  time.Time `json:"generated"`
	GoVersion  string    `json:"go_version"`
	GOOS       string    `json:"goos"`
	GOARCH     string    `json:"goarch"`
	NumCPU     int       `json:"num_cpu"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Results    []Result  `json:"results"`
}

// NewReport wraps results with a description of this machine.
func NewReport(results []Result) Report {
	return Report{
		Generated:  time.Now().Round(0).UTC(),
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Results:    results,
	}
}

// CheckGates fails unless every gate answers GET /healthz with 200.
func CheckGates(ctx context.Context, client *http.Client, gates []string) error {
	for _, g := range gates {
		u := strings.TrimRight(g, "/") + "/healthz"
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, u, nil)
		if err != nil {
			cancel()
			return fmt.Errorf("gate %s: %w", g, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			return fmt.Errorf("gate %s unreachable: %w", g, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("gate %s: GET /healthz answered %s", g, resp.Status)
		}
	}
	return nil
}

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitSetup = 1 // gates unreachable, output not writable, run interrupted
	ExitUsage = 2 // bad flags or workload definitions
)

// Main is `oncebench load`: it runs the named workloads against the
// gates, one after another, prints the table and writes the JSON report.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("oncebench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: oncebench load -gates http://127.0.0.1:8080,http://127.0.0.1:8081 [-workload unique,duplicates,storm|all] [flags]\n\n")
		fmt.Fprintf(stderr, "Flags other than -gates, -workload, -workloads-file, -out, -check and -list override the fields of every selected workload.\n\n")
		fs.PrintDefaults()
	}
	gates := fs.String("gates", "", "comma-separated gate base URLs (required)")
	workload := fs.String("workload", "unique", `comma-separated workload names, or "all" (every workload without a disruption); -list shows them`)
	file := fs.String("workloads-file", "", "JSON array of workload specs; they add to (or replace, by name) the built-in ones")
	list := fs.Bool("list", false, "list the workloads and exit")
	out := fs.String("out", "", "write the JSON report to this file")
	check := fs.Bool("check", true, "require GET /healthz = 200 from every gate before running")
	// Overrides.
	fs.Int("concurrency", 0, "workers (closed loop) or senders (open loop)")
	fs.Float64("rate", 0, "requests per second; > 0 runs open loop, 0 closed loop")
	fs.Duration("duration", 0, "run length (with -requests: whichever ends first)")
	fs.Int64("requests", 0, "number of requests (with -duration: whichever ends first)")
	fs.Int("payload-bytes", 0, "size of the job payload in bytes")
	fs.Float64("dup-ratio", 0, "duplicates: fraction of requests that reuse a recent key")
	fs.Int("recent-keys", 0, "duplicates: how many recent keys per worker may be reused")
	fs.String("spread", "", `"round-robin" or "per-worker"`)
	fs.Int("max-outstanding", 0, "open loop: scheduled-but-unanswered requests before drops")
	fs.Duration("timeout", 0, "per-request timeout")
	fs.Bool("timeline", false, "record per-second buckets and the longest gap without a 2xx")
	fs.Bool("warmup", false, "open each worker's connection before the workers are released")
	fs.String("token", "", "bearer token for the Authorization header")
	fs.String("client-prefix", "", "client_id prefix of the keys (<prefix>-<worker>)")
	fs.String("type", "", "job type")
	fs.String("datacenters", "", "comma-separated datacenters to name in each job")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "oncebench: "+format+"\n", a...)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}

	defs := Workloads()
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return usage("%v", err)
		}
		more, err := ReadWorkloads(f)
		f.Close()
		if err != nil {
			return usage("%s: %v", *file, err)
		}
		defs = merge(defs, more)
	}
	if *list {
		for _, d := range defs {
			fmt.Fprintf(stdout, "%-14s %-6s %s\n", d.Name, d.Mode(), d.Description)
		}
		return ExitOK
	}
	gateList := config.SplitList(*gates)
	if len(gateList) == 0 {
		return usage("-gates is required, e.g. -gates http://127.0.0.1:8080,http://127.0.0.1:8081")
	}

	var specs []Spec
	for _, name := range config.SplitList(*workload) {
		if name == "all" {
			for _, d := range defs {
				if d.Disrupt == "" {
					specs = append(specs, clone(d))
				}
			}
			continue
		}
		s, err := lookup(defs, name)
		if err != nil {
			return usage("-workload: %v", err)
		}
		specs = append(specs, s)
	}
	if len(specs) == 0 {
		return usage("-workload names no workload")
	}
	for i := range specs {
		specs[i].Gates = gateList
		if err := override(&specs[i], fs); err != nil {
			return usage("%v", err)
		}
		n, err := specs[i].Normalize()
		if err != nil {
			return usage("workload %q: %v", specs[i].Name, err)
		}
		specs[i] = n
	}

	var tmp *os.File
	if *out != "" {
		var err error
		tmp, err = os.CreateTemp(filepath.Dir(*out), ".oncebench-*.json")
		if err != nil {
			fmt.Fprintf(stderr, "oncebench: -out: %v\n", err)
			return ExitSetup
		}
		defer func() {
			tmp.Close()
			os.Remove(tmp.Name()) // after the rename: nothing to remove
		}()
	}
	if *check {
		c := NewClient(1)
		err := CheckGates(ctx, c, gateList)
		c.CloseIdleConnections()
		if err != nil {
			fmt.Fprintf(stderr, "oncebench: %v\n", err)
			return ExitSetup
		}
	}

	var results []Result
	code := ExitOK
	for _, s := range specs {
		if s.Disrupt != "" && s.OnDisrupt == nil {
			fmt.Fprintf(stderr, "oncebench: %s: disruption %q is left to an orchestrator; running without it\n", s.Name, s.Disrupt)
		}
		fmt.Fprintf(stderr, "oncebench: running %s (%s) against %d gate(s)\n", s.Name, describe(s), len(gateList))
		res, err := Run(ctx, s)
		if err != nil {
			fmt.Fprintf(stderr, "oncebench: %v\n", err)
			if res.Name != "" {
				results = append(results, res)
			}
			code = ExitSetup
			break
		}
		results = append(results, res)
	}
	if len(results) > 0 {
		if err := WriteTable(stdout, results); err != nil {
			fmt.Fprintf(stderr, "oncebench: %v\n", err)
			return ExitSetup
		}
		for _, r := range results {
			if len(r.Timeline) > 0 {
				fmt.Fprintln(stdout)
				_ = WriteTimeline(stdout, r)
			}
		}
	}
	if tmp != nil {
		enc := json.NewEncoder(tmp)
		enc.SetIndent("", "  ")
		err := enc.Encode(NewReport(results))
		if err == nil {
			err = tmp.Close()
		}
		if err == nil {
			err = os.Rename(tmp.Name(), *out)
		}
		if err != nil {
			fmt.Fprintf(stderr, "oncebench: -out: %v\n", err)
			return ExitSetup
		}
	}
	return code
}

func describe(s Spec) string {
	var b strings.Builder
	if s.Open() {
		fmt.Fprintf(&b, "open loop %g/s, %d senders", s.Rate, s.Concurrency)
	} else {
		fmt.Fprintf(&b, "closed loop, %d workers", s.Concurrency)
	}
	fmt.Fprintf(&b, ", %s keys", s.Keys)
	if s.Duration > 0 {
		fmt.Fprintf(&b, ", %s", s.Duration)
	}
	if s.Requests > 0 {
		fmt.Fprintf(&b, ", %d requests", s.Requests)
	}
	return b.String()
}

// override copies every override flag that was set on the command line into s.
func override(s *Spec, fs *flag.FlagSet) error {
	var err error
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	get := func(name string) any { return fs.Lookup(name).Value.(flag.Getter).Get() }
	if set["concurrency"] {
		s.Concurrency = get("concurrency").(int)
	}
	if set["rate"] {
		s.Rate = get("rate").(float64)
		s.MaxOutstanding = 0 // re-derive from the new rate unless given
	}
	// Either bound given on the command line replaces both of the workload's.
	if set["duration"] || set["requests"] {
		s.Duration, s.Requests = 0, 0
		if set["duration"] {
			s.Duration = Duration(get("duration").(time.Duration))
		}
		if set["requests"] {
			s.Requests = get("requests").(int64)
		}
		if s.Duration == 0 && s.Requests == 0 {
			err = &SpecError{Field: "duration", Value: "0", Want: "a duration or a request count to bound the run"}
		}
	}
	if set["payload-bytes"] {
		s.PayloadBytes = get("payload-bytes").(int)
	}
	if set["dup-ratio"] {
		s.DuplicateRatio = get("dup-ratio").(float64)
		if s.Keys == KeysDuplicates && s.DuplicateRatio == 0 {
			s.Keys = KeysUnique // a ratio of 0 is unique keys; 0 would mean "default"
		}
	}
	if set["recent-keys"] {
		s.RecentKeys = get("recent-keys").(int)
	}
	if set["spread"] {
		s.Spread = Spread(get("spread").(string))
	}
	if set["max-outstanding"] {
		s.MaxOutstanding = get("max-outstanding").(int)
	}
	if set["timeout"] {
		s.Timeout = Duration(get("timeout").(time.Duration))
	}
	if set["timeline"] {
		s.Timeline = get("timeline").(bool)
	}
	if set["warmup"] {
		s.Warmup = get("warmup").(bool)
	}
	if set["token"] {
		s.Token = get("token").(string)
	}
	if set["client-prefix"] {
		s.ClientPrefix = get("client-prefix").(string)
	}
	if set["type"] {
		s.JobType = get("type").(string)
	}
	if set["datacenters"] {
		s.Datacenters = config.SplitList(get("datacenters").(string))
	}
	return err
}

// merge returns base with the specs of more replacing those of the same name
// and the others appended.
func merge(base, more []Spec) []Spec {
	out := base
	for _, m := range more {
		replaced := false
		for i := range out {
			if out[i].Name == m.Name {
				out[i], replaced = m, true
			}
		}
		if !replaced {
			out = append(out, m)
		}
	}
	return out
}
