package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/localcluster"
)

const (
	dashboardPath = "../../deploy/grafana/once.json"
	alertsPath    = "../../deploy/prometheus/alerts.yml"
)

// onceMetric finds the once metric names in a PromQL expression. The queries
// are checked by their metric names and their balance, not by a PromQL parser:
// the Prometheus module is too large a dependency for this check.
var onceMetric = regexp.MustCompile(`\bonce_[a-z0-9_]+\b`)

// query is one PromQL expression of the dashboard or the alert rules.
type query struct{ where, expr string }

func dashboardQueries(t *testing.T) []query {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var qs []query
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, query{"dashboard panel " + p.Title, tg.Expr})
		}
	}
	if d.Title == "" || len(qs) == 0 {
		t.Fatalf("%s: no title or no queries", dashboardPath)
	}
	return qs
}

func alertQueries(t *testing.T) []query {
	b, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	var qs []query
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			switch {
			case r.Alert == "" || seen[r.Alert]:
				t.Errorf("%s: a rule without a name or named twice: %q", alertsPath, r.Alert)
			case r.For == "":
				t.Errorf("%s: %s has no for", alertsPath, where)
			case !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]):
				t.Errorf("%s: %s: severity %q", alertsPath, where, r.Labels["severity"])
			case r.Annotations["summary"] == "" || r.Annotations["description"] == "":
				t.Errorf("%s: %s lacks a summary or a description", alertsPath, where)
			}
			seen[r.Alert] = true
			qs = append(qs, query{where, r.Expr})
		}
	}
	if len(qs) == 0 {
		t.Fatalf("%s: no rules", alertsPath)
	}
	return qs
}

// checkQueries returns what is wrong with the queries: an expression with no
// once metric, unbalanced brackets, or a metric not in exported.
func checkQueries(qs []query, exported map[string]bool) []string {
	var problems []string
	for _, q := range qs {
		names := onceMetric.FindAllString(q.expr, -1)
		if len(names) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no once metric in %q", q.where, q.expr))
		}
		if !balanced(q.expr) {
			problems = append(problems, fmt.Sprintf("%s: unbalanced brackets or quotes in %q", q.where, q.expr))
		}
		for _, n := range names {
			if !exported[n] {
				problems = append(problems, fmt.Sprintf("%s: %s is not exported by a gate or a manager", q.where, n))
			}
		}
	}
	return problems
}

func balanced(expr string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, r := range expr {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inQuote
}

// exportedNames scrapes url and returns its metric names, with the series
// names of histograms and summaries (_bucket, _sum, _count).
func exportedNames(t *testing.T, client *http.Client, url string, into map[string]bool) {
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	for name, f := range families {
		into[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			into[name+"_bucket"], into[name+"_sum"], into[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			into[name+"_sum"], into[name+"_count"] = true, true
		}
	}
}

// The dashboard and the alert rules in deploy/ name only metrics that a
// running gate and manager export: they cannot drift from the code.
func TestDashboardsAndAlertsUseExportedMetrics(t *testing.T) {
	// With TLS files and a token file: the series of their reloads
	// (OnceReloadFailing) are exported only by nodes that have them.
	files, _, _ := issueClusterTLS(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tok-alpha alpha\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		o.TLS = files
		o.GateEnv = append(o.GateEnv, "GATE_TOKEN_FILE="+tokens)
	})
	if _, err := c.WaitLeader(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Some series exist only once an asynchronous event has happened: the
	// autopilot's (the leader's first health computation) and the clock's
	// (offsets measured on gossip probes). Wait for them, as the managers'
	// statuses show them, before scraping.
	ctx := ctxFor(t, time.Minute)
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		health := false
		for _, m := range c.Managers {
			st, err := c.Status(ctx, m)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", m.Name, err)
			}
			if st.ClockGroupOffset == nil || len(st.ClockOffsets) == 0 {
				return false, fmt.Sprintf("%s to measure its peers' clocks (%v) and its group's", m.Name, st.ClockOffsets)
			}
			health = health || st.Autopilot != nil
		}
		return health, "the leader's autopilot health"
	})
	gate := c.GateURLs()[0]
	// Traffic, so that labelled series exist: an admission, its replay, a
	// refusal, a read.
	for _, body := range []string{`{"type":"demo"}`, `{"type":"demo"}`, `{"type":"demo","payload":{"n":2}}`} {
		req, _ := http.NewRequest(http.MethodPost, gate+"/v1/jobs", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "host1.dc1:9:1:0123456789abcdef")
		req.Header.Set("Authorization", "Bearer tok-alpha")
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	exported := map[string]bool{}
	exportedNames(t, c.HTTPClient(), gate+"/metrics", exported)
	for _, m := range c.Managers {
		exportedNames(t, c.HTTPClient(), c.ManagerURL(m, "/metrics"), exported)
	}
	qs := append(dashboardQueries(t), alertQueries(t)...)
	for _, p := range checkQueries(qs, exported) {
		t.Error(p)
	}
	t.Logf("%d queries checked against %d exported series names", len(qs), len(exported))

	// The check can fail.
	bad := []query{{"test", `rate(once_gate_no_such_total[1m])`}, {"test", `sum(rate(once_gate_replays_total[1m])`}, {"test", `up`}}
	if got := checkQueries(bad, exported); len(got) != 3 {
		t.Errorf("bad queries: %d problems found, want 3: %v", len(got), got)
	}
}
