package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/keys"
)

// The outbox's timings.
const (
	outboxInterval   = 2 * time.Second  // between passes at the leader
	outboxGrace      = 2 * time.Second  // after an entry is resolved, before it is carried (the gate's own fan-out usually finishes first)
	outboxMaxBackoff = time.Minute      // longest wait between two attempts for one (entry, datacenter)
	outboxAttempt    = 10 * time.Second // bound on one Submit to another datacenter
	outboxParallel   = 16               // Submits in flight per pass
)

// outbox carries the submissions this datacenter resolved to the other
// datacenters they name, until each has a final outcome there: a job whose
// gate reached only some of its datacenters is completed without waiting for
// the client's retry. Every COMMITTED or REJECTED entry records the
// datacenters its request names, and a Submit of the same (tenant, key,
// fingerprint, job ID) is idempotent at the other end. A final outcome is
// recorded in the ledger (a Confirm command, one per pass for every pair that
// got one), so a new leader does not ask again, and a fully confirmed entry
// leaves the ledger's order the pass walks. An entry that expires before
// every datacenter confirmed it stays owed in the ledger (ledger.FSM.
// OwedMultiDatacenter) and is carried on, however long that takes, across
// leader changes and restarts; its expiry is logged once per leader. The
// entries carried are bounded by MANAGER_OUTBOX_MAX_ENTRIES at admission
// (admitToOutbox). The backoff of the pairs still waiting, and the pairs
// answered whose Confirm is pending, are kept in memory at the leader, for
// this term and this ledger: a Restore ends that memory (pass).
type outbox struct {
	m     *Manager
	peers func() map[string][]string // datacenter -> manager RPC addresses
	log   *slog.Logger

	mu      sync.Mutex
	clients map[string]*rpc.Client
	state   map[outboxKey]*outboxState
	// restores is the count of the ledger's Restores (Manager.restores)
	// when state was last cleared: state is of the ledger since then.
	restores uint64
}

type outboxKey struct{ tenant, key, jobID, dc string }

type outboxState struct {
	done bool
	// expiredLogged: this leader logged that the entry outlived its TTL.
	expiredLogged bool
	// invalidTerm is the Raft term in which this leader last logged that
	// the datacenter refuses the submission as invalid (0: never), so it
	// logs that once per term.
	invalidTerm uint64
	next        time.Time
	backoff     time.Duration
}

func newOutbox(m *Manager, peers func() map[string][]string, log *slog.Logger) *outbox {
	return &outbox{m: m, peers: peers, log: log, clients: map[string]*rpc.Client{}, state: map[outboxKey]*outboxState{}}
}

// run passes over the ledger every outboxInterval while this manager leads,
// until ctx ends.
func (o *outbox) run(ctx context.Context) {
	defer o.close()
	every(ctx.Done(), outboxInterval, func() {
		if o.m.CheckLeader() != nil {
			o.m.metrics.outboxOldest.Set(0)
			o.mu.Lock()
			clear(o.state) // a later term asks again
			o.mu.Unlock()
			return
		}
		o.pass(ctx)
	})
}

// pass carries every due (entry, datacenter) pair once.
func (o *outbox) pass(ctx context.Context) {
	own := o.m.cfg.Datacenter
	peers := o.peers()
	now, wall := o.m.expiryNow(), time.Now()
	seen := map[outboxKey]bool{}
	type job struct {
		k outboxKey
		e ledger.Entry
	}
	var due []job
	var oldest int64 // the least ResolvedAt carried (0: none)
	o.mu.Lock()
	// A Restore (an operator's snapshot restore, or a snapshot installed
	// from another leader) replaced the ledger the state is of: the
	// restored one may owe a pair the state holds done, its Confirm after
	// the snapshot, which would then never be asked again in this term
	// (TestOutboxCarriesAgainWhatARestoreUnconfirmed). Read before the
	// ledger: a Restore after it is seen at the next pass.
	if r := o.m.restores.Load(); r != o.restores {
		clear(o.state)
		o.restores = r
	}
	o.mu.Unlock()
	visit := func(e ledger.Entry, expired bool) bool {
		if oldest == 0 || e.ResolvedAt < oldest {
			oldest = e.ResolvedAt
		}
		grace := !expired && now.Sub(time.Unix(0, e.ResolvedAt)) < outboxGrace
		for _, dc := range e.Request.Datacenters {
			if dc == own || slices.Contains(e.Confirmed, dc) {
				continue
			}
			k := outboxKey{e.Tenant, e.Key, e.JobID, dc}
			// The job's live entry, visited first, is carried instead of
			// its owed copy (the key sent again after its entry expired,
			// same job ID), in grace or not: once per pair, with the live
			// entry's expiry; the owed copy's is carriedMinTTL, and a
			// second Submit that landed first would make the other
			// datacenter's entry expire at once
			// (TestOutboxCarriesALiveAndOwedJobOnce). One Confirm clears
			// both.
			carriedLive := seen[k]
			seen[k] = true
			if grace {
				continue
			}
			o.mu.Lock()
			st := o.state[k]
			if st == nil {
				st = &outboxState{}
				o.state[k] = st
			}
			ready := !st.done && !wall.Before(st.next)
			logExpiry := expired && !st.expiredLogged
			st.expiredLogged = st.expiredLogged || expired
			o.mu.Unlock()
			if logExpiry {
				o.log.Warn("a multi-datacenter submission outlived its TTL before another datacenter confirmed it; the outbox keeps carrying it",
					logging.KeyTenant, e.Tenant, logging.KeyIdemKey, e.Key, logging.KeyJobID, e.JobID, logging.KeyDatacenter, dc,
					logging.KeyDuration, now.Sub(time.Unix(0, e.ResolvedAt)).Round(time.Second))
			}
			if _, known := peers[dc]; ready && known && !carriedLive {
				due = append(due, job{k, e})
			}
		}
		return true
	}
	o.m.fsm.ResolvedMultiDatacenter(own, func(e ledger.Entry) bool { return visit(e, false) })
	o.m.fsm.OwedMultiDatacenter(func(e ledger.Entry) bool { return visit(e, true) })
	age := 0.0
	if oldest != 0 {
		age = max(now.Sub(time.Unix(0, oldest)).Seconds(), 0)
	}
	o.m.metrics.outboxOldest.Set(age)
	o.mu.Lock()
	// A pair not seen was confirmed meanwhile: nothing left to carry.
	maps.DeleteFunc(o.state, func(k outboxKey, _ *outboxState) bool { return !seen[k] })
	o.mu.Unlock()

	var (
		g         errgroup.Group
		confirmMu sync.Mutex
		confirmed []ledger.Confirmation
	)
	g.SetLimit(outboxParallel)
	for _, j := range due {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if o.carry(ctx, j.k, j.e) {
				confirmMu.Lock()
				confirmed = append(confirmed, ledger.Confirmation{Tenant: j.k.tenant, Key: j.k.key, JobID: j.k.jobID, Datacenter: j.k.dc})
				confirmMu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	left, err := o.m.confirm(ctx, confirmed)
	o.m.metrics.outboxConfirmed.Add(float64(len(confirmed) - len(left)))
	if err != nil {
		o.log.Debug("recording the other datacenters' outcomes failed; a later pass asks again", logging.KeyCount, len(left), logging.KeyError, err)
	}
	if len(left) > 0 {
		// Not recorded (leadership lost, a timeout): the pairs are not
		// done. A manager that leads again before a pass saw it follow
		// (run clears the state then) must ask them again, a replay at the
		// other end, or their entries stay carried for its whole term
		// (TestOutboxConfirmLostToALeaderChangeIsRetried).
		o.mu.Lock()
		for _, c := range left {
			if st := o.state[outboxKey{c.Tenant, c.Key, c.JobID, c.Datacenter}]; st != nil {
				st.done = false
			}
		}
		o.mu.Unlock()
	}
}

// carriedMinTTL is the shortest lifetime a carried entry gets: one whose
// entry is about to expire, or expired, here still lands (its job is what matters; the
// job's retention does not depend on it), and briefly answers duplicates.
const carriedMinTTL = time.Second

// confirmChunk bounds the items of one Confirm command.
const confirmChunk = 1024

// confirm records items in the ledger, in Confirm commands of at most
// confirmChunk items, and returns the items it could not record, with the
// error that stopped it.
func (m *Manager) confirm(ctx context.Context, items []ledger.Confirmation) ([]ledger.Confirmation, error) {
	for len(items) > 0 {
		n := min(len(items), confirmChunk)
		if _, err := m.apply(ctx, ledger.Confirm{Items: items[:n]}); err != nil {
			return items, err
		}
		items = items[n:]
	}
	return nil, nil
}

// carry sends one entry's submission to one datacenter and records the
// answer; it reports whether the answer was final.
func (o *outbox) carry(ctx context.Context, k outboxKey, e ledger.Entry) bool {
	// The entry expires at the same instant there as here: its remaining
	// lifetime, counted from now (which the other leader accepts as the
	// basis within expiryBasisMaxSkew of its clock), instead of that
	// datacenter's TTL counted from whenever this carry lands.
	//
	// The answer is read for its outcome and rejection alone, never its job:
	// it comes without the payload (omit_payload), which would otherwise
	// cross the WAN back for nothing (TestOutboxAnswersComeWithoutThePayload).
	now := o.m.expiryNow().UnixNano()
	req := &rpcpb.SubmitRequest{Tenant: e.Tenant, Key: e.Key, Fingerprint: e.Fingerprint, ProposedJobId: e.JobID, Carried: true, Carrier: o.m.cfg.Datacenter,
		Job:                  &rpcpb.JobRequest{Type: e.Request.Type, Payload: e.Request.Payload, Datacenters: e.Request.Datacenters},
		ExpiryBasisUnixNanos: now,
		ResultTtlNanos:       max(e.ExpiresAt-now, int64(carriedMinTTL)),
		OmitPayload:          true,
	}
	actx, cancel := context.WithTimeout(ctx, outboxAttempt)
	defer cancel()
	resp, err := o.client(k.dc).Submit(actx, req)
	// A capacity rejection (429, that datacenter at MANAGER_MAX_QUEUED_JOBS)
	// of a job committed here is not final either: it expires, and the key
	// is then judged afresh there, as the client's own retry after its
	// Retry-After would be; the pair stays owed until that datacenter admits
	// the job (TestOutboxCarriesAgainAfterACapacityRejection). (A rejection
	// here is carried too, and a capacity rejection there agrees with it.)
	full := err == nil && resp.Outcome == rpc.OutcomeRejected &&
		resp.GetRejection().GetReason() == ledger.ReasonCapacity && e.State == ledger.StateCommitted
	if full {
		err = errors.New("rejected for capacity: " + resp.GetRejection().GetDetail())
	}
	final := err == nil && resp.Outcome != rpc.OutcomeInProgress
	// An invalid answer (a datacenter that cannot take the submission as
	// it is: one not yet upgraded to read it, or a request over a bound)
	// is not final: the job must still reach that datacenter once an
	// operator made it accept the submission. But no retry alone changes
	// it, so it is retried at the longest backoff, counted, and logged at
	// error once per entry, datacenter and term
	// (TestOutboxLogsAnInvalidRefusalOnceAndRetries).
	invalid := errors.Is(err, rpc.ErrInvalid)
	var term uint64
	if invalid {
		o.m.metrics.outboxInvalid.Inc()
		term = o.m.raft.CurrentTerm()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.state[k]
	if st == nil {
		return false
	}
	if final {
		st.done = true
		switch resp.Outcome {
		case rpc.OutcomeKeyReused:
			o.log.Error("another datacenter holds this key for another request", logging.KeyTenant, k.tenant,
				logging.KeyIdemKey, k.key, logging.KeyDatacenter, k.dc)
		case rpc.OutcomeKeyExpired:
			// Final: the key expired there after its job ran, or its
			// sequence is below the client's watermark window there, where
			// that datacenter cannot tell whether it ran and so never
			// admits it. In the second case the job does not run there.
			o.log.Error("another datacenter answers that this key expired there; unless it ran the job before, the job does not run there",
				logging.KeyTenant, k.tenant, logging.KeyIdemKey, k.key, logging.KeyJobID, k.jobID, logging.KeyDatacenter, k.dc)
		}
		return true
	}
	st.backoff = min(max(2*st.backoff, outboxInterval), outboxMaxBackoff)
	if invalid {
		st.backoff = outboxMaxBackoff
	}
	// Jitter keeps the leaders of several datacenters from retrying in step.
	st.next = time.Now().Add(st.backoff/2 + rand.N(st.backoff/2+1))
	if invalid && st.invalidTerm != term {
		st.invalidTerm = term
		o.log.Error("another datacenter refuses a multi-datacenter submission as invalid; the outbox retries it at its longest backoff until that datacenter accepts it, which needs an operator",
			logging.KeyTenant, k.tenant, logging.KeyIdemKey, k.key, logging.KeyJobID, k.jobID, logging.KeyDatacenter, k.dc, logging.KeyError, err)
		return false
	}
	o.log.Debug("carrying a submission to another datacenter failed; will retry", logging.KeyTenant, k.tenant,
		logging.KeyIdemKey, k.key, logging.KeyDatacenter, k.dc, logging.KeyError, err)
	return false
}

// client returns the client of datacenter dc's leader.
func (o *outbox) client(dc string) *rpc.Client {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.clients[dc]; ok {
		return c
	}
	var clientTLS *tls.Config // nil: plain TCP
	if o.m.deps.ClusterTLS != nil {
		clientTLS = o.m.deps.ClusterTLS.ClientConfig()
	}
	c := rpc.NewClient(rpc.ClientConfig{
		Resolver: rpc.ResolverFunc(func() []string { return o.peers()[dc] }),
		Logger:   o.log.With(logging.KeyComponent, "rpc", logging.KeyDatacenter, dc),
		Secret:   o.m.deps.ClusterSecret,
		TLS:      clientTLS,
		Dial:     o.m.deps.Dial,
	})
	o.clients[dc] = c
	return c
}

func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.clients {
		c.CloseIdleConnections()
	}
}

// admitToOutbox refuses a new multi-datacenter submission while the outbox
// carries MANAGER_OUTBOX_MAX_ENTRIES entries (docs/multidc.md, "The
// outbox"): nothing is recorded, and the client retries the key later
// (503 outbox_full). A submission another datacenter's outbox carries here
// is admitted: that datacenter admitted it already, under its own bound. The
// bound is checked before the Reserve, so the submissions in flight at that
// instant may pass it by as many. A structured key whose sequence its
// client's watermark refuses is let through too: the ledger answers it
// idempotency_key_expired and records nothing, as it would with room.
func (m *Manager) admitToOutbox(req *rpcpb.SubmitRequest, k keys.Key) error {
	own := m.cfg.Datacenter
	if req.Carried || !slices.ContainsFunc(req.Job.Datacenters, func(dc string) bool { return dc != own }) {
		return nil
	}
	if n := m.fsm.OutboxLen(); n >= m.cfg.OutboxMaxEntries {
		// Only when full: the watermark is read under the ledger's lock.
		if k.Structured {
			if w, ok := m.fsm.Watermark(req.Tenant, k.ClientID, k.Nonce); ok && w.Refuses(k.Sequence) {
				return nil
			}
		}
		m.metrics.outboxRefused.Inc()
		return rpc.Errorf(rpc.CodeOutboxFull,
			"the outbox carries its maximum of %d multi-datacenter submissions not yet confirmed by every datacenter they name", m.cfg.OutboxMaxEntries)
	}
	return nil
}

// OutboxGauges are the outbox's gauges, read from the ledger when scraped:
// the same on every manager of the datacenter (replicated state).
func (m *Manager) OutboxGauges() []prometheus.Collector {
	fsm, maxEntries := m.fsm, m.cfg.OutboxMaxEntries
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_outbox_entries",
			Help: "Multi-datacenter submissions the outbox carries: resolved here, not yet confirmed by every other datacenter they name (live or expired)."},
			func() float64 { return float64(fsm.OutboxLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_outbox_expired_entries",
			Help: "Of once_manager_outbox_entries, those whose entry expired here before every datacenter confirmed them (kept until they do)."},
			func() float64 { return float64(fsm.OwedLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_outbox_max_entries",
			Help: "MANAGER_OUTBOX_MAX_ENTRIES: once_manager_outbox_entries at which new multi-datacenter submissions are refused (503 outbox_full)."},
			func() float64 { return float64(maxEntries) }),
	}
}

// A submission another datacenter's outbox carries here (the SubmitRequest's
// Carried) comes from a datacenter that holds its job: its Carrier. Carrying
// the job back there would be harmless only while the carrier still
// remembers it; one that carried it after more than
// MANAGER_JOB_RETENTION_SECONDS (a datacenter that came back after a day)
// has forgotten both its entry and its job, and would admit the key again: a
// second run. So once the job is final here, this datacenter records the
// carrier as confirmed, and answers a carried submission of a job it still
// owes from that owed entry instead of admitting it again.
//
// Only the carrier is confirmed: the other datacenters the request names
// stay this datacenter's to carry as well. Two datacenters that both
// admitted a job and carried it to each other at the same time must not
// each leave a third to the other (docs/multidc.md).

// carriedOwed answers a carried submission from this datacenter's owed entry
// of the same job: this datacenter resolved the job before its entry expired
// and may have forgotten the job since, so admitting it again could run it
// twice (TestOutboxAnswersACarriedJobFromTheOwedEntry).
func (m *Manager) carriedOwed(req *rpcpb.SubmitRequest, jobID string) (*rpcpb.SubmitResponse, bool) {
	if !req.Carried {
		return nil, false
	}
	e, ok := m.fsm.Owed(req.Tenant, req.Key, jobID)
	if !ok {
		return nil, false
	}
	return m.entryResponse(e, "", true), true
}

// confirmCarrier records, once a carried submission has a final outcome
// here, that its carrier holds the job, so that this datacenter's outbox
// does not carry the job back (TestOutboxDoesNotCarryAJobBackToItsOrigin).
// A failure (leadership lost) leaves the pair to this datacenter's outbox,
// as before.
func (m *Manager) confirmCarrier(ctx context.Context, req *rpcpb.SubmitRequest, resp *rpcpb.SubmitResponse) {
	if !req.Carried || (resp.Outcome != rpc.OutcomeCommitted && resp.Outcome != rpc.OutcomeRejected) {
		return
	}
	dc := req.Carrier
	if dc == "" || dc == m.cfg.Datacenter || !slices.Contains(req.GetJob().GetDatacenters(), dc) ||
		!m.owes(req.Tenant, req.Key, resp.JobId, dc) {
		return
	}
	items := []ledger.Confirmation{{Tenant: req.Tenant, Key: req.Key, JobID: resp.JobId, Datacenter: dc}}
	if _, err := m.apply(ctx, ledger.Confirm{Items: items}); err != nil {
		m.log.Debug("recording that a carried submission's carrier holds the job failed; the outbox carries it back",
			logging.KeyDatacenter, dc, logging.KeyError, err)
	}
}

// owes reports whether this datacenter's ledger, live or owed, still has
// job jobID of (tenant, key) to carry to dc.
func (m *Manager) owes(tenant, key, jobID, dc string) bool {
	if e, ok := m.fsm.Entry(tenant, key); ok && e.JobID == jobID && !slices.Contains(e.Confirmed, dc) {
		return true
	}
	e, ok := m.fsm.Owed(tenant, key, jobID)
	return ok && !slices.Contains(e.Confirmed, dc)
}
