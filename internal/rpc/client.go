package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/pkg/api"
)

// Resolver tells a client where the datacenter's managers are.
type Resolver interface {
	// Managers returns the RPC addresses (host:port) of the managers.
	Managers() []string
}

// StaticResolver is a fixed list of manager RPC addresses.
type StaticResolver []string

// Managers implements Resolver.
func (s StaticResolver) Managers() []string { return s }

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func() []string

// Managers implements Resolver.
func (f ResolverFunc) Managers() []string { return f() }

// ClientConfig configures a Client. Zero values take the defaults noted.
type ClientConfig struct {
	Resolver Resolver
	// Transport carries the requests; nil means a keep-alive transport sized for
	// many concurrent requests to few hosts.
	Transport http.RoundTripper
	Logger    *slog.Logger
	// AttemptTimeout bounds one attempt against one manager, beyond the time the
	// manager is allowed to wait on a PENDING entry. Default 3s.
	AttemptTimeout time.Duration
	// RetryBackoff is the first pause between attempts (doubling up to
	// MaxBackoff). Defaults 10ms and 250ms.
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
}

// Client calls the manager leader of one datacenter. It follows "not leader"
// answers to the leader they name, and retries NotLeader, Unavailable and
// transport failures against the current leader until the caller's context ends;
// then it returns an error matching ErrUnavailable. Other errors are returned at
// once. Retrying a submission is safe: the ledger deduplicates by key.
type Client struct {
	cfg ClientConfig
	hc  *http.Client
	log *slog.Logger

	mu     sync.Mutex
	leader string // last known leader, "" when unknown
	rr     int    // round-robin position over Resolver.Managers()
}

// NewTransport returns the default transport: keep-alive connections, enough idle
// connections per manager for a busy gate, and short dial timeouts so a dead
// manager is detected quickly.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// NewClient returns a Client.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Transport == nil {
		cfg.Transport = NewTransport()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 3 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 10 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 250 * time.Millisecond
	}
	if cfg.Resolver == nil {
		cfg.Resolver = StaticResolver(nil)
	}
	return &Client{cfg: cfg, hc: &http.Client{Transport: cfg.Transport}, log: cfg.Logger}
}

// Leader returns the last known leader's RPC address ("" when unknown).
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// CloseIdleConnections closes idle keep-alive connections.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Submit submits a job at the leader.
func (c *Client) Submit(ctx context.Context, req *SubmitRequest) (*SubmitResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, Errorf(CodeInvalid, "encode submit: %v", err)
	}
	var resp SubmitResponse
	wait := time.Duration(req.WaitMillis) * time.Millisecond
	if err := c.do(ctx, http.MethodPost, "/rpc/v1/submit", nil, body, wait, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// GetJob reads a job at the leader.
func (c *Client) GetJob(ctx context.Context, tenant, id string) (*api.Job, error) {
	var job api.Job
	q := url.Values{"tenant": {tenant}}
	if err := c.do(ctx, http.MethodGet, "/rpc/v1/jobs/"+url.PathEscape(id), q, nil, 0, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

// ListJobs reads a page of jobs at the leader.
func (c *Client) ListJobs(ctx context.Context, req *ListJobsRequest) (*ListJobsResponse, error) {
	q := url.Values{"tenant": {req.Tenant}}
	if req.Type != "" {
		q.Set("type", req.Type)
	}
	if req.Status != "" {
		q.Set("status", req.Status)
	}
	if req.Limit != 0 {
		q.Set("limit", fmt.Sprint(req.Limit))
	}
	if req.After != "" {
		q.Set("after", req.After)
	}
	var resp ListJobsResponse
	if err := c.do(ctx, http.MethodGet, "/rpc/v1/jobs", q, nil, 0, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// GetKey reads an idempotency key's entry at the leader.
func (c *Client) GetKey(ctx context.Context, tenant, key string) (*api.KeyInfo, error) {
	var info api.KeyInfo
	q := url.Values{"tenant": {tenant}, "key": {key}}
	if err := c.do(ctx, http.MethodGet, "/rpc/v1/keys", q, nil, 0, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// LeaderStatus returns the leader's status: it succeeds only when a leader
// answers, which is what a gate's readiness means.
func (c *Client) LeaderStatus(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.do(ctx, http.MethodGet, "/rpc/v1/status", url.Values{"leader": {"1"}}, nil, 0, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// StatusOf returns one manager's own status, wherever it stands; no retries.
func (c *Client) StatusOf(ctx context.Context, addr string) (*Status, error) {
	var st Status
	if err := c.attempt(ctx, addr, http.MethodGet, "/rpc/v1/status", nil, nil, 0, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// maxHintHops bounds how many "not leader" hints are followed without pausing,
// so two managers that disagree about the leader cannot make a client spin.
const maxHintHops = 3

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, extra time.Duration, out any) error {
	backoff := c.cfg.RetryBackoff
	var last error
	hops := 0
	for {
		addr := c.pick()
		if addr == "" {
			last = errors.New("no manager address known")
		} else {
			err := c.attempt(ctx, addr, method, path, q, body, extra, out)
			if err == nil {
				c.setLeader(addr)
				return nil
			}
			last = err
			var e *Error
			switch {
			case errors.As(err, &e) && e.Code == CodeNotLeader:
				c.forget(addr)
				if e.Leader != "" && e.Leader != addr && hops < maxHintHops {
					hops++
					c.setLeader(e.Leader)
					continue
				}
			case errors.As(err, &e) && e.Code == CodeUnavailable:
				c.forget(addr)
			case errors.As(err, &e):
				return err // a definite answer: not found, invalid, ledger full, internal
			default:
				c.forget(addr) // transport failure: dead connection, refused, timeout
			}
			c.log.Debug("rpc attempt failed, retrying", logging.KeyAddr, addr, logging.KeyPath, path, logging.KeyError, err)
		}
		hops = 0
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("no manager leader answered before the deadline (last error: %v)", last)}
		case <-t.C:
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
}

func (c *Client) attempt(ctx context.Context, addr, method, path string, q url.Values, body []byte, extra time.Duration, out any) error {
	actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout+extra)
	defer cancel()
	u := "http://" + addr + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, u, rd)
	if err != nil {
		return Errorf(CodeInvalid, "build request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("rpc %s %s: %w", method, addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("rpc %s %s: read: %w", method, addr, err)
	}
	if len(b) > MaxResponseBytes {
		// Never decode a cut answer: say what happened instead.
		return Errorf(CodeTooLarge, "the %s answer is over %d bytes", path, MaxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return Errorf(CodeInternal, "decode %s answer: %v", path, err)
	}
	return nil
}

func (c *Client) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != "" {
		return c.leader
	}
	ms := c.cfg.Resolver.Managers()
	if len(ms) == 0 {
		return ""
	}
	c.rr = (c.rr + 1) % len(ms)
	return ms[c.rr]
}

func (c *Client) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

func (c *Client) forget(addr string) {
	c.mu.Lock()
	if c.leader == addr {
		c.leader = ""
	}
	c.mu.Unlock()
}
