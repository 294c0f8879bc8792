package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A span's traceparent, carried as a string and extracted on the other side,
// makes the remote span's children part of the same trace, with the sender's
// span as their parent.
func TestInjectExtractCarriesTheTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer(Name)

	ctx, gate := tr.Start(context.Background(), "gate.forward")
	tp1 := Inject(ctx)
	gate.End()
	if len(tp1) != 55 {
		t.Fatalf("traceparent %q", tp1)
	}
	_, mgr := tr.Start(Extract(context.Background(), tp1), "manager.submit")
	mgr.End()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	g, m := spans[0], spans[1]
	if m.SpanContext().TraceID() != g.SpanContext().TraceID() || m.Parent().SpanID() != g.SpanContext().SpanID() || !m.Parent().IsRemote() {
		t.Fatalf("manager span %v (parent %v) is not the remote child of %v", m.SpanContext(), m.Parent(), g.SpanContext())
	}
}

func TestInjectWithoutTracingIsEmpty(t *testing.T) {
	if got := Inject(context.Background()); got != "" {
		t.Fatalf("no span: %q", got)
	}
	// The no-op tracer's spans are not sampled.
	ctx, span := trace.NewNoopTracerProvider().Tracer(Name).Start(context.Background(), "x")
	defer span.End()
	if got := Inject(ctx); got != "" {
		t.Fatalf("no-op span: %q", got)
	}
	if ctx := Extract(context.Background(), "garbage"); trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("a malformed traceparent made a span context")
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, ok := range []string{"", "http://127.0.0.1:4318", "https://collector.example:4318/"} {
		if err := CheckEndpoint(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"127.0.0.1:4318", "grpc://x:4317", "http://"} {
		if err := CheckEndpoint(bad); !errors.Is(err, ErrEndpoint) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// Credentials in the URL are refused (the exporter would drop them),
	// and the error does not repeat the password.
	for _, withUser := range []string{"http://user:s3cret@collector:4318", "https://s3cret@collector:4318/v1/traces", "ftp://u:s3cret@x"} {
		err := CheckEndpoint(withUser)
		if !errors.Is(err, ErrEndpoint) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v", withUser, err)
		}
	}
	if _, err := Start(context.Background(), "nope", "s", "n", "d"); !errors.Is(err, ErrEndpoint) {
		t.Fatalf("Start with a bad endpoint: %v", err)
	}
}

// With tracing off, Span starts nothing and allocates nothing; on, it starts
// a span of the global provider's, a child of the one ctx holds.
func TestSpan(t *testing.T) {
	ctx := context.Background()
	if got, span := Span(ctx, "x"); got != ctx || span.IsRecording() {
		t.Fatalf("off: a new context or a recording span")
	}
	if n := testing.AllocsPerRun(100, func() {
		_, span := Span(ctx, "x")
		span.End()
	}); n != 0 {
		t.Errorf("off: %v allocations a span, want 0", n)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	otel.SetTracerProvider(tp) // for the rest of the package's tests: none uses it
	enabled.Store(true)
	defer enabled.Store(false)

	pctx, parent := Span(ctx, "parent")
	_, child := Span(pctx, "child")
	child.End()
	parent.End()
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].Name() != "child" || spans[0].Parent().SpanID() != spans[1].SpanContext().SpanID() {
		t.Fatalf("on: spans %v, want child under parent", spans)
	}
}

// An endpoint refused for its form does not repeat credentials it seems to
// carry either: a URL with a user whose "://" was mistyped is no URL with a
// user to url.Parse, and its password would be shown as it is.
func TestCheckEndpointMistypedWithCredentials(t *testing.T) {
	for _, bad := range []string{"http//user:s3cret@collector:4318", "http:/user:s3cret@collector", "user:s3cret@collector:4318"} {
		err := CheckEndpoint(bad)
		if !errors.Is(err, ErrEndpoint) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
