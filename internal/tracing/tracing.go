// Package tracing is once's OpenTelemetry tracing: a submission's trace
// runs from the gate's HTTP handler, through its forward to each
// datacenter's leader (the W3C traceparent travels in the submit stream's
// message, rpcpb.SubmitRequest.TraceParent, since one gRPC stream carries
// many submissions), to the manager's admission and its Raft applies. It is
// off by default: without an endpoint the global no-op tracer provider
// stays, and every span is free.
//
// Spans are exported with OTLP over HTTP (go.opentelemetry.io/otel's
// otlptracehttp) in batches; the OTEL_* variables of the OpenTelemetry SDK
// apply (OTEL_TRACES_SAMPLER, OTEL_BSP_SCHEDULE_DELAY, OTEL_EXPORTER_OTLP_HEADERS,
// ...). docs/operations.md lists the spans.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
)

// Name is the instrumentation scope of every once span.
const Name = "github.com/once-dev/once"

// ErrEndpoint: an OTLP endpoint that is not an http or https URL, or one
// that carries credentials.
var ErrEndpoint = errors.New("tracing: the OTLP endpoint must be an http:// or https:// URL")

// CheckEndpoint validates an OTLP/HTTP endpoint URL ("" is off, and valid).
// A URL with credentials (user:password@) is refused: the exporter would
// drop them, sending spans unauthenticated, and the endpoint is logged at
// start; credentials go in OTEL_EXPORTER_OTLP_HEADERS. The error names the
// URL without them.
func CheckEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: %q", ErrEndpoint, redact(endpoint, u, err))
	}
	if u.User != nil {
		return fmt.Errorf("%w without credentials: %q carries some, which the exporter would not send: "+
			"give them in OTEL_EXPORTER_OTLP_HEADERS (Authorization=...)", ErrEndpoint, withoutUser(u))
	}
	return nil
}

// redact is endpoint without the credentials it carries, for an error:
// "(not a URL)" when it does not parse (the text may hold anything).
func redact(endpoint string, u *url.URL, err error) string {
	if err != nil {
		return "(not a URL)"
	}
	if u.User != nil {
		return withoutUser(u)
	}
	// A URL with a user whose "://" was mistyped (http//user:password@host)
	// parses without one: what precedes its '@' may still be a password.
	return config.WithoutCredentials(endpoint)
}

// withoutUser is u with its user information (a user name, which may be a
// token, and a password) shown as "***".
func withoutUser(u *url.URL) string {
	c := *u
	c.User = url.User("***")
	return c.String()
}

// Start installs a tracer provider exporting to endpoint (an OTLP/HTTP base
// URL such as http://otel-collector:4318, whose spans go to /v1/traces; a
// URL with a path is used as it is) as the
// global one, naming the process service (once-gate, once-manager) and node.
// The returned shutdown flushes what is buffered. An empty endpoint installs
// nothing and returns a no-op shutdown.
func Start(ctx context.Context, endpoint, service, node, datacenter string) (shutdown func(context.Context) error, err error) {
	if endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, err
	}
	if u, _ := url.Parse(endpoint); u.Path == "" || u.Path == "/" {
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: traces have their
		// own path under it.
		u.Path = "/v1/traces"
		endpoint = u.String()
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.instance.id", node),
		attribute.String("once.datacenter", datacenter),
	)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	enabled.Store(true)
	return tp.Shutdown, nil
}

// tracer is taken once: the global provider's tracers delegate to the
// provider Start installs later, and asking for one per span would take the
// global provider's lock on every submission.
var tracer = otel.Tracer(Name)

// enabled: Start installed an exporting provider.
var enabled atomic.Bool

// Span starts a span named name with once's tracer (of the global provider)
// when tracing is on.
// Off (Start was given no endpoint), it starts nothing: it returns ctx and
// the span ctx already holds (a no-op one, or the non-recording remote
// parent Extract put there), whose End does nothing, where the global
// tracer would allocate a span and a context for every call on the
// submission path.
func Span(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracer.Start(ctx, name, opts...)
}

// propagator is W3C trace context, whatever the global propagator is.
var propagator = propagation.TraceContext{}

// Inject is the W3C traceparent of ctx's span, "" when ctx has no sampled
// span (tracing off): what a forward puts in rpcpb.SubmitRequest.TraceParent.
func Inject(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// Extract returns ctx carrying the remote span context of traceparent, the
// parent of the spans started from it; ctx itself when traceparent is empty
// or malformed.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Flush calls shutdown (what Start returned) with at most 5 seconds to
// export the spans still buffered, logging a failure to log.
func Flush(shutdown func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn("flushing traces", logging.KeyError, err)
	}
}
