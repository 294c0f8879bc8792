package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/localcluster"
)

// collectedSpan is one span an OTLP/HTTP receiver got.
type collectedSpan struct {
	service, name       string
	trace, span, parent string
}

// otlpReceiver is a minimal OTLP/HTTP trace receiver: it decodes every
// export into spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []collectedSpan
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, collectedSpan{service: service, name: s.GetName(),
					trace: hex.EncodeToString(s.GetTraceId()), span: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId())})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (o *otlpReceiver) byName() map[string][]collectedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[string][]collectedSpan{}
	for _, s := range o.spans {
		m[s.name] = append(m[s.name], s)
	}
	return m
}

// With GATE_OTLP_ENDPOINT and MANAGER_OTLP_ENDPOINT set, one submission is
// one trace across the processes: the gate's forward span, the leader's
// manager.submit as its child (the traceparent crossed the submit stream),
// and the Reserve and the Commit's Raft applies as children of that.
// Without the settings nothing is exported (the rest of the suite).
func TestTracingFromGateToRaftApply(t *testing.T) {
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		o.Env = append(o.Env, "MANAGER_OTLP_ENDPOINT="+srv.URL, "GATE_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	})
	ctx := ctxFor(t, time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := post(ctx, &http.Client{Timeout: 10 * time.Second}, c.GateURLs()[0], "traced-1", `{"type":"demo","payload":{}}`)
	if err != nil || a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s %v", a.status, a.body, err)
	}
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		m := rcv.byName()
		var names []string
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		seen := "spans received: " + strings.Join(names, ", ")
		if len(m["gate.forward"]) == 0 || len(m["manager.submit"]) == 0 || len(m["raft.apply.admit"]) == 0 {
			return false, seen
		}
		g := m["gate.forward"][0]
		var sub *collectedSpan
		for i, s := range m["manager.submit"] {
			if s.trace == g.trace && s.parent == g.span {
				sub = &m["manager.submit"][i]
			}
		}
		if g.service != "once-gate" || sub == nil || sub.service != "once-manager" {
			return false, fmt.Sprintf("%s; gate.forward %+v; manager.submit %+v", seen, g, m["manager.submit"])
		}
		for _, name := range []string{"raft.apply.admit"} {
			found := false
			for _, s := range m[name] {
				found = found || (s.trace == g.trace && s.parent == sub.span)
			}
			if !found {
				return false, fmt.Sprintf("%s; no %s child of manager.submit %s in trace %s: %+v", seen, name, sub.span, g.trace, m[name])
			}
		}
		return true, ""
	})
}
