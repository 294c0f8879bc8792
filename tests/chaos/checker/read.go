package checker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// ErrRead marks a failure to read the cluster (as opposed to a violation).
var ErrRead = errors.New("checker: cannot read the cluster")

// clusterState is what the read endpoints showed.
type clusterState struct {
	// listed holds every job GET /v1/jobs returned, by id.
	listed map[tid]api.Job
	// fetched holds GET /v1/jobs/{id} answers: nil for 404.
	fetched map[tid]*api.Job
	// keys holds GET /v1/idempotency-keys/{key} answers: nil for 404.
	keys map[tk]*api.KeyInfo
}

type reader struct {
	cfg    Config
	base   string
	client *http.Client
	owned  bool
}

func newReader(cfg Config) (*reader, error) {
	if cfg.GateURL == "" {
		return nil, errors.New("checker: Config.GateURL is required")
	}
	if _, err := url.Parse(cfg.GateURL); err != nil {
		return nil, fmt.Errorf("checker: Config.GateURL %q: %w", cfg.GateURL, err)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.ReadAttempts <= 0 {
		cfg.ReadAttempts = 8
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = 8
	}
	if cfg.PageSize <= 0 || cfg.PageSize > api.MaxListLimit {
		cfg.PageSize = api.MaxListLimit
	}
	r := &reader{cfg: cfg, base: strings.TrimRight(cfg.GateURL, "/"), client: cfg.HTTPClient}
	if r.client == nil {
		r.owned = true
		r.client = &http.Client{
			Transport: &http.Transport{
				DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
				MaxIdleConnsPerHost:   cfg.Parallelism,
				IdleConnTimeout:       30 * time.Second,
				ResponseHeaderTimeout: cfg.RequestTimeout,
			},
			Timeout: cfg.RequestTimeout,
		}
	}
	return r, nil
}

func (r *reader) close() {
	if r.owned {
		r.client.CloseIdleConnections()
	}
}

// readCluster lists every tenant's jobs, looks up every key of the history, and
// fetches every job an answer or a key entry names.
func (r *reader) readCluster(ctx context.Context, h *historyIndex) (*clusterState, error) {
	cl := &clusterState{
		listed:  map[tid]api.Job{},
		fetched: map[tid]*api.Job{},
		keys:    map[tk]*api.KeyInfo{},
	}
	for _, tenant := range h.tenants(r.cfg.Tokens) {
		if err := r.list(ctx, tenant, cl.listed); err != nil {
			return nil, err
		}
	}

	var mu sync.Mutex
	err := parallel(ctx, r.cfg.Parallelism, h.keys, func(ctx context.Context, k tk) error {
		var info api.KeyInfo
		found, err := r.get(ctx, k.tenant, "/v1/idempotency-keys/"+url.PathEscape(k.key), &info,
			api.CodeIdempotencyKeyNotFound)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if found {
			cl.keys[k] = &info
		} else {
			cl.keys[k] = nil
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	want := map[tid]bool{}
	for _, k := range h.keys {
		for _, id := range answeredIDs(h.byKey[k]) {
			want[tid{k.tenant, id}] = true
		}
		if info := cl.keys[k]; info != nil && info.JobID != nil && *info.JobID != "" {
			want[tid{k.tenant, *info.JobID}] = true
		}
	}
	ids := make([]tid, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	err = parallel(ctx, r.cfg.Parallelism, ids, func(ctx context.Context, id tid) error {
		var job api.Job
		found, err := r.get(ctx, id.tenant, "/v1/jobs/"+url.PathEscape(id.id), &job, api.CodeJobNotFound)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if found {
			cl.fetched[id] = &job
		} else {
			cl.fetched[id] = nil
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// list reads every page of the tenant's jobs into into.
func (r *reader) list(ctx context.Context, tenant string, into map[tid]api.Job) error {
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/jobs?limit=" + strconv.Itoa(r.cfg.PageSize)
		if cursor != "" {
			path += "&after=" + url.QueryEscape(cursor)
		}
		var l api.JobList
		if _, err := r.get(ctx, tenant, path, &l); err != nil {
			return err
		}
		for _, j := range l.Jobs {
			into[tid{tenant, j.JobID}] = j
		}
		if l.Next == nil || *l.Next == "" {
			return nil
		}
		if seen[*l.Next] {
			return fmt.Errorf("%w: GET /v1/jobs as %s: cursor %q repeats on page %d", ErrRead, tenant, *l.Next, page)
		}
		seen[*l.Next] = true
		cursor = *l.Next
	}
}

// get reads path as tenant into v. It returns found=false when the answer is a
// 404 whose code is one of notFound; transient failures are retried with
// backoff; anything else is an error.
func (r *reader) get(ctx context.Context, tenant, path string, v any, notFound ...api.Code) (bool, error) {
	backoff := 10 * time.Millisecond
	var last error
	for attempt := 1; attempt <= r.cfg.ReadAttempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return false, fmt.Errorf("%w: GET %s: %w (last: %v)", ErrRead, path, ctx.Err(), last)
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
		}
		status, body, err := r.do(ctx, tenant, path)
		if err != nil {
			if ctx.Err() != nil {
				return false, fmt.Errorf("%w: GET %s: %w", ErrRead, path, ctx.Err())
			}
			last = err
			continue
		}
		switch {
		case status == http.StatusOK:
			if err := json.Unmarshal(body, v); err != nil {
				return false, fmt.Errorf("%w: GET %s as %s: decoding: %w", ErrRead, path, tenant, err)
			}
			return true, nil
		case status == http.StatusNotFound:
			var p api.Problem
			_ = json.Unmarshal(body, &p)
			for _, c := range notFound {
				if p.Code == c {
					return false, nil
				}
			}
			return false, fmt.Errorf("%w: GET %s as %s: 404 with code %q", ErrRead, path, tenant, p.Code)
		case status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout:
			last = fmt.Errorf("status %d: %s", status, truncate(body))
			continue
		default:
			return false, fmt.Errorf("%w: GET %s as %s: status %d: %s", ErrRead, path, tenant, status, truncate(body))
		}
	}
	return false, fmt.Errorf("%w: GET %s as %s: %d attempts, last: %v", ErrRead, path, tenant, r.cfg.ReadAttempts, last)
}

func (r *reader) do(ctx context.Context, tenant, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	if dc := r.cfg.Datacenter; dc != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "datacenter=" + url.QueryEscape(dc)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", api.ContentTypeJSON)
	if tok, ok := r.cfg.Tokens[tenant]; ok && tok != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+tok)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, body, nil
}

func truncate(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// parallel runs fn over items with at most n at once and returns the first
// error; after an error the remaining items are skipped.
func parallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan T)
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if ctx.Err() != nil {
					continue
				}
				if err := fn(ctx, it); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case work <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}
