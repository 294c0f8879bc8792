package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestLifecycleAgainstModel drives the job lifecycle with a random sequence
// of every worker and tenant command (Lease with types, bytes, reclaims and
// replays; Heartbeat, Complete and Fail under current and stale leases, some
// stamped behind ledger time as a leader's racing proposals are; ExpireLeases;
// Cancel; Retry; Expire), some of them in WorkerBatches that touch one job
// several times, and Completes and Fails against byte budgets at their
// edge, on the memory and the disk store at once; it checks every Result,
// the whole job table (the memory store's after every entry, the disk
// store's every 20) and the listings by state against a reference model
// written from docs/ledger.md ("Job lifecycle", "Cancel and retry", "The
// byte budget") alone. Every few hundred entries the disk FSM is replaced, in
// turn, by the memory FSM's snapshot restored on disk and by its own store
// reopened, so the orders rebuilt then (the RUNNING jobs' in-memory orders,
// the queues' floors) must go on as the live ones do. So: no job is lost
// (a queued job due is handed out by a Lease that has room for it, a job
// leaves the table only at the end of its retention), none is doubled (a
// stale lease changes nothing, a result is recorded once), and both stores
// agree, byte for byte in their snapshots.
func TestLifecycleAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runLifecycleModel(t, seed, 1200) })
	}
}

// lifeModel is the reference: the jobs by (tenant, ID), as the docs say
// each command leaves them.
type lifeModel struct {
	jobs map[[2]string]*Job
	// bytes and tenantBytes are the accounted bytes (docs/ledger.md, "The
	// byte budget"): taken from the FSM before each entry, then moved by
	// the model's own changes of job sizes.
	bytes       uint64
	tenantBytes map[string]uint64
}

// size is what a job accounts for: its overhead, payload, result and error.
func modelSize(j *Job) uint64 {
	return JobOverhead + uint64(len(j.Payload)+len(j.Life.Result)+len(j.Life.Error))
}

// over says whether j, holding result and errText instead of its own,
// would bring its tenant's bytes over maxTenant (checked first) or the
// ledger's over maxBytes; 0 is no bound, and a job that does not grow is
// never refused.
func (m *lifeModel) over(j *Job, result, errText int, maxBytes, maxTenant uint64) (Outcome, bool) {
	was, will := modelSize(j), JobOverhead+uint64(len(j.Payload)+result+errText)
	switch {
	case will <= was:
	case maxTenant > 0 && m.tenantBytes[j.Tenant]+will-was > maxTenant:
		return OutcomeTenantBytesFull, true
	case maxBytes > 0 && m.bytes+will-was > maxBytes:
		return OutcomeBytesFull, true
	}
	return 0, false
}

func (m *lifeModel) get(tenant, id string) (*Job, bool) {
	j, ok := m.jobs[[2]string{tenant, id}]
	return j, ok
}

// edit replaces the job by a copy that change edits and returns the copy.
func (m *lifeModel) edit(j *Job, change func(j *Job, l *JobLife)) Job {
	n := *j
	l := *j.Life
	change(&n, &l)
	n.Life = &l
	m.jobs[[2]string{n.Tenant, n.ID}] = &n
	m.bytes += modelSize(&n) - modelSize(j)
	m.tenantBytes[n.Tenant] += modelSize(&n) - modelSize(j)
	return n
}

// sorted returns the jobs keep accepts, ordered by less.
func (m *lifeModel) sorted(keep func(*Job) bool, less func(a, b *Job) bool) []*Job {
	var out []*Job
	for _, j := range m.jobs {
		if keep(j) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *Job) int {
		if less(a, b) {
			return -1
		}
		return 1
	})
	return out
}

func isRunning(j *Job) bool { return j.Life != nil && j.Life.State == JobRunning }

func modelFinish(j *Job, l *JobLife, st JobState, now int64) {
	l.State = st
	l.FinishedAt = now
	j.ExpiresAt = now + l.Retention
}

func modelQueue(j *Job, l *JobLife, runAt int64) {
	l.State = JobQueued
	l.RunAt = runAt
}

// expired ends an expired lease: DEAD with every attempt used, else QUEUED
// at runAt.
func (m *lifeModel) expired(j *Job, now, runAt int64, maxAttempts uint64) (dead bool) {
	m.edit(j, func(j *Job, l *JobLife) {
		l.LeaseID, l.Holder, l.LeaseExpiresAt, l.Error = "", "", 0, ErrorLeaseExpired
		dead = maxAttempts > 0 && l.Attempts >= maxAttempts
		if dead {
			modelFinish(j, l, JobDead, now)
		} else {
			modelQueue(j, l, runAt)
		}
	})
	return dead
}

func (m *lifeModel) lease(c Lease) Result {
	lr := &LeaseResult{}
	if c.Replay {
		for _, id := range c.LeaseIDs {
			for _, j := range m.sorted(func(j *Job) bool {
				return j.Tenant == c.Tenant && isRunning(j) && j.Life.LeaseID == id && j.Life.LeaseExpiresAt > c.Now
			}, func(a, b *Job) bool { return a.Seq < b.Seq }) {
				lr.Jobs = append(lr.Jobs, *j)
			}
		}
		if len(lr.Jobs) > 0 {
			lr.Replayed = true
			return Result{Outcome: OutcomeLeased, Lease: lr}
		}
	}
	typeOK := func(j *Job) bool { return len(c.Types) == 0 || slices.Contains(c.Types, j.Type) }
	var size uint64
	full := false
	fits := func(j *Job) bool {
		n := uint64(ListJobBytes(j))
		if full || (c.MaxBytes > 0 && len(lr.Jobs) > 0 && size+n > c.MaxBytes) {
			full = true
			return false
		}
		size += n
		return true
	}
	hand := func(j *Job, reclaim bool) {
		id := c.LeaseIDs[len(lr.Jobs)]
		lr.Jobs = append(lr.Jobs, m.edit(j, func(j *Job, l *JobLife) {
			if reclaim {
				l.Error = ErrorLeaseExpired
			}
			l.State = JobRunning
			l.Attempts++
			l.LeaseID, l.Holder, l.LeaseExpiresAt = id, c.Holder, c.Expiry
		}))
	}
	due := m.sorted(func(j *Job) bool { return j.Tenant == c.Tenant && isRunning(j) && j.Life.LeaseExpiresAt <= c.Now },
		func(a, b *Job) bool {
			if a.Life.LeaseExpiresAt != b.Life.LeaseExpiresAt {
				return a.Life.LeaseExpiresAt < b.Life.LeaseExpiresAt
			}
			return a.Seq < b.Seq
		})
	for _, j := range due[:min(len(due), MaxReclaim)] {
		switch {
		case c.MaxAttempts > 0 && j.Life.Attempts >= c.MaxAttempts:
			m.expired(j, c.Now, c.Now, c.MaxAttempts)
			lr.Dead++
		case len(lr.Jobs) < int(c.Max) && typeOK(j) && fits(j):
			hand(j, true)
			lr.Reclaimed++
		}
	}
	if len(lr.Jobs) == int(c.Max) || full {
		return Result{Outcome: OutcomeLeased, Lease: lr}
	}
	queued := m.sorted(func(j *Job) bool {
		return j.Tenant == c.Tenant && j.Life != nil && j.Life.State == JobQueued && j.Life.RunAt <= c.Now && typeOK(j)
	}, func(a, b *Job) bool {
		if a.Life.RunAt != b.Life.RunAt {
			return a.Life.RunAt < b.Life.RunAt
		}
		return a.Seq < b.Seq
	})
	for _, j := range queued {
		if len(lr.Jobs) == int(c.Max) || !fits(j) {
			break
		}
		hand(j, false)
	}
	return Result{Outcome: OutcomeLeased, Lease: lr}
}

// leased is the common judgement of Heartbeat, Complete and Fail: the job,
// or the answer when the command changes nothing.
func (m *lifeModel) leased(tenant, id, lease string, now int64, ended func(*JobLife) bool) (*Job, Result, bool) {
	j, ok := m.get(tenant, id)
	switch {
	case !ok || j.Gone(now): // past its retention, swept or not
		return nil, Result{Outcome: OutcomeNotFound}, false
	case j.Life != nil && j.Life.LeaseID == lease && ended(j.Life):
		return nil, Result{Outcome: OutcomeUnchanged, Job: *j}, false
	case j.Life == nil || j.Life.State != JobRunning || j.Life.LeaseID != lease || j.Life.LeaseExpiresAt <= now:
		return nil, Result{Outcome: OutcomeLeaseLost, Job: *j}, false
	}
	return j, Result{}, true
}

func (m *lifeModel) heartbeat(c Heartbeat) Result {
	j, res, ok := m.leased(c.Tenant, c.JobID, c.LeaseID, c.Now, func(*JobLife) bool { return false })
	if !ok {
		return res
	}
	return Result{Outcome: OutcomeExtended, Job: m.edit(j, func(_ *Job, l *JobLife) { l.LeaseExpiresAt = c.Expiry })}
}

func (m *lifeModel) complete(c Complete) Result {
	j, res, ok := m.leased(c.Tenant, c.JobID, c.LeaseID, c.Now, func(l *JobLife) bool { return l.State == JobSucceeded })
	if !ok {
		return res
	}
	if o, over := m.over(j, len(c.Result), 0, c.MaxBytes, c.MaxTenantBytes); over {
		return Result{Outcome: o, Job: *j}
	}
	return Result{Outcome: OutcomeCompleted, Job: m.edit(j, func(j *Job, l *JobLife) {
		l.Result, l.Error = c.Result, ""
		modelFinish(j, l, JobSucceeded, c.Now)
	})}
}

func (m *lifeModel) fail(c Fail) Result {
	j, res, ok := m.leased(c.Tenant, c.JobID, c.LeaseID, c.Now, func(l *JobLife) bool {
		return l.State == JobQueued || l.State == JobFailed || l.State == JobDead
	})
	if !ok {
		return res
	}
	if o, over := m.over(j, len(j.Life.Result), len(c.Error), c.MaxBytes, c.MaxTenantBytes); over {
		return Result{Outcome: o, Job: *j}
	}
	return Result{Outcome: OutcomeFailed, Job: m.edit(j, func(j *Job, l *JobLife) {
		l.Error = c.Error
		switch {
		case !c.Retry:
			modelFinish(j, l, JobFailed, c.Now)
		case c.MaxAttempts > 0 && l.Attempts >= c.MaxAttempts:
			modelFinish(j, l, JobDead, c.Now)
		default:
			modelQueue(j, l, c.RetryAt)
		}
	})}
}

func (m *lifeModel) expireLeases(c ExpireLeases) Result {
	lr := &LeaseResult{}
	res := Result{Outcome: OutcomeLeasesExpired, Lease: lr}
	due := m.sorted(func(j *Job) bool { return isRunning(j) && j.Life.LeaseExpiresAt <= c.Now }, func(a, b *Job) bool {
		if a.Life.LeaseExpiresAt != b.Life.LeaseExpiresAt {
			return a.Life.LeaseExpiresAt < b.Life.LeaseExpiresAt
		}
		if a.Seq != b.Seq {
			return a.Seq < b.Seq
		}
		return a.Tenant < b.Tenant
	})
	for i, j := range due {
		if c.Max != 0 && uint64(i) == c.Max {
			res.More = true
			break
		}
		if m.expired(j, c.Now, c.RetryAt, c.MaxAttempts) {
			lr.Dead++
		} else {
			lr.Requeued++
		}
	}
	return res
}

// action is Cancel's or Retry's judgement of the job (every action here has
// a key of its own and room for its entry).
func (m *lifeModel) action(a JobAction, retry bool) (Outcome, *Job) {
	j, ok := m.get(a.Tenant, a.JobID)
	if !ok || j.Gone(a.Now) {
		return OutcomeNotFound, nil
	}
	st := j.State()
	switch {
	case !retry && st == JobQueued:
		n := m.edit(j, func(j *Job, l *JobLife) {
			l.LeaseID, l.Holder, l.LeaseExpiresAt = "", "", 0
			modelFinish(j, l, JobCancelled, a.Now)
		})
		return OutcomeCancelled, &n
	case !retry && st == JobCancelled:
		return OutcomeUnchanged, j
	case retry && (st == JobFailed || st == JobDead):
		n := m.edit(j, func(j *Job, l *JobLife) {
			l.LeaseID, l.Holder, l.LeaseExpiresAt = "", "", 0
			l.FinishedAt, l.Result = 0, nil
			modelQueue(j, l, a.Now)
			j.ExpiresAt = 0
		})
		return OutcomeRetried, &n
	}
	return OutcomeConflict, j
}

// sameJob compares jobs field by field (nil and empty bytes alike).
func sameJob(a, b Job) bool {
	if (a.Life == nil) != (b.Life == nil) {
		return false
	}
	if a.Life != nil {
		la, lb := *a.Life, *b.Life
		if !bytes.Equal(la.Result, lb.Result) {
			return false
		}
		la.Result, lb.Result = nil, nil
		if !reflect.DeepEqual(la, lb) {
			return false
		}
	}
	if !bytes.Equal(a.Payload, b.Payload) {
		return false
	}
	a.Life, b.Life, a.Payload, b.Payload = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// lifeRun is the state of one run: the two FSMs, the model, and what the
// generator knows.
type lifeRun struct {
	*twin
	t       *testing.T
	rng     *rand.Rand
	now     int64
	model   lifeModel
	keyN    int
	leases  [][3]string    // (tenant, job, lease) handed out, current or not
	replays [][]string     // lease ID sets of replayable Leases
	seen    map[string]int // what the run reached, by outcome and case
}

var lifeTenants = []string{"acme", "globex"}

// tick is the grain of the run's times: coarse, so that a command often
// lands exactly on a lease's expiry or a retry's run time.
const tick = sec / 2

func runLifecycleModel(t *testing.T, seed uint64, steps int) {
	r := &lifeRun{twin: newTwin(t), t: t, rng: rand.New(rand.NewPCG(seed, 99)), now: t0,
		model: lifeModel{jobs: map[[2]string]*Job{}}, seen: map[string]int{}}
	for step := 0; step < steps; step++ {
		r.now += r.rng.Int64N(5) * tick
		switch p := r.rng.IntN(100); {
		case p < 18:
			r.admit()
		case p < 80:
			cmds := []Command{r.workerCommand()}
			if r.rng.IntN(4) == 0 { // a batch, some of whose items name one job
				for range 1 + r.rng.IntN(4) {
					cmds = append(cmds, r.workerCommand())
				}
			}
			r.applyWorker(cmds)
		case p < 88:
			c := ExpireLeases{Now: r.stamp(), Max: uint64(r.rng.IntN(3)), MaxAttempts: uint64(r.rng.IntN(4))}
			c.RetryAt = c.Now + r.rng.Int64N(8)*tick
			r.check(c, r.apply(Encode(c)), r.model.expireLeases(c))
		case p < 96:
			r.act()
		default:
			c := Expire{Now: r.now, WatermarkTTL: 0}
			r.apply(Encode(c))
			for k, j := range r.model.jobs {
				if j.ExpiresAt != 0 && j.ExpiresAt <= c.Now {
					delete(r.model.jobs, k)
				}
			}
		}
		r.compareTables(step)
		if step%250 == 249 {
			r.swapDisk(step, (step/250)%2 == 0)
		}
	}
	r.finish()
	for _, want := range []string{"ledger.Lease leased", "reclaimed", "dead", "requeued", "replayed",
		"ledger.Heartbeat extended", "ledger.Heartbeat lease_lost",
		"ledger.Complete completed", "ledger.Complete unchanged", "ledger.Complete lease_lost",
		"ledger.Fail failed", "ledger.Fail unchanged", "ledger.Fail lease_lost",
		"ledger.Complete bytes_full", "ledger.Complete tenant_bytes_full", "ledger.Fail tenant_bytes_full",
		"ledger.Cancel cancelled", "ledger.Cancel conflict", "ledger.Retry retried", "ledger.Retry conflict"} {
		if r.seen[want] == 0 {
			t.Errorf("the run never reached %q; make the generator reach it", want)
		}
	}
}

// stamp is a command's Now: the leader's clock, or a little behind it (a
// proposal stamped before another that reached the log first).
func (r *lifeRun) stamp() int64 {
	if r.rng.IntN(5) == 0 {
		return r.now - (1+r.rng.Int64N(6))*tick
	}
	return r.now
}

func (r *lifeRun) admit() {
	r.keyN++
	tn := lifeTenants[r.rng.IntN(len(lifeTenants))]
	rs := reserve(tn, fmt.Sprintf("k%d", r.keyN), r.now)
	rs.Request.Type = []string{"a", "b", "c"}[r.rng.IntN(3)]
	rs.Request.Payload = json.RawMessage(fmt.Sprintf(`{"pad":"%s"}`, bytes.Repeat([]byte("x"), r.rng.IntN(300))))
	c := QueueCommit(commit(rs, r.now))
	c.JobExpiresAt = r.now + (5+r.rng.Int64N(120))*sec
	res := r.apply(Encode(admitWith(rs, c)))
	if res.Outcome != OutcomeCommitted || res.Job.State() != JobQueued {
		r.t.Fatalf("admit: %v %v", res.Outcome, res.Job.State())
	}
	j := res.Job
	r.model.jobs[[2]string{j.Tenant, j.ID}] = &j
}

// workerCommand draws a Lease, or a Heartbeat, Complete or Fail under a lease
// handed out earlier (the latest most often: likely current).
func (r *lifeRun) workerCommand() Command {
	now := r.stamp()
	if len(r.leases) == 0 || r.rng.IntN(3) == 0 {
		tn := lifeTenants[r.rng.IntN(len(lifeTenants))]
		c := Lease{Tenant: tn, Holder: fmt.Sprintf("w%d", r.rng.IntN(3)), Max: uint64(1 + r.rng.IntN(4)), Now: now,
			Expiry: now + (1+r.rng.Int64N(16))*tick, MaxAttempts: uint64(r.rng.IntN(4))}
		if r.rng.IntN(3) == 0 {
			c.Types = [][]string{{"a"}, {"b"}, {"c", "a"}}[r.rng.IntN(3)]
		}
		if r.rng.IntN(4) == 0 {
			c.MaxBytes = uint64(ListJobOverhead + r.rng.IntN(1200))
		}
		if len(r.replays) > 0 && r.rng.IntN(4) == 0 { // a retry of a replayable Lease
			c.Replay = true
			c.LeaseIDs = r.replays[len(r.replays)-1] // the latest, most likely still held
			if r.rng.IntN(3) == 0 {
				c.LeaseIDs = r.replays[r.rng.IntN(len(r.replays))]
			}
			c.Max = uint64(len(c.LeaseIDs))
			return c
		}
		for i := range c.Max {
			c.LeaseIDs = append(c.LeaseIDs, fmt.Sprintf("L%d-%d-%d", r.idx, r.rng.IntN(1000), i))
		}
		if r.rng.IntN(4) == 0 {
			c.Replay = true
			r.replays = append(r.replays, c.LeaseIDs)
		}
		return c
	}
	i := len(r.leases) - 1
	if r.rng.IntN(3) == 0 {
		i = r.rng.IntN(len(r.leases))
	}
	g := r.leases[i]
	switch p := r.rng.IntN(10); {
	case p < 3:
		return Heartbeat{Tenant: g[0], JobID: g[1], LeaseID: g[2], Now: now, Expiry: now + (1+r.rng.Int64N(16))*tick}
	case p < 6:
		c := Complete{Tenant: g[0], JobID: g[1], LeaseID: g[2], Now: now,
			Result: json.RawMessage(fmt.Sprintf(`{"by":%q,"at":%d,"pad":%q}`, g[2], now, bytes.Repeat([]byte("r"), r.rng.IntN(200))))}
		c.MaxBytes, c.MaxTenantBytes = r.budgets(g[0], g[1], len(c.Result), 0)
		return c
	default:
		c := Fail{Tenant: g[0], JobID: g[1], LeaseID: g[2], Error: "e" + g[2] + strings.Repeat("e", r.rng.IntN(200)), Retry: r.rng.IntN(4) > 0, Now: now,
			RetryAt: now + r.rng.Int64N(8)*tick, MaxAttempts: uint64(r.rng.IntN(4))}
		c.MaxBytes, c.MaxTenantBytes = r.budgets(g[0], g[1], -1, len(c.Error))
		return c
	}
}

// budgets draws the byte budgets of a Complete or Fail of the job, which
// would then hold a result and an error of these lengths (result -1: its
// own): half the time none, else about the bytes the ledger or the tenant holds now
// plus what the job would grow by, one byte short of it, exactly it or one
// byte more, so that the bound is met on both sides of its edge.
func (r *lifeRun) budgets(tenant, jobID string, result, errText int) (maxBytes, maxTenant uint64) {
	var grow int64
	if j, ok := r.model.get(tenant, jobID); ok && j.Life != nil {
		if result < 0 {
			result = len(j.Life.Result)
		}
		grow = int64(result+errText) - int64(len(j.Life.Result)+len(j.Life.Error))
	}
	edge := func(held uint64) uint64 { return uint64(max(int64(held)+grow+r.rng.Int64N(3)-1, 1)) }
	switch r.rng.IntN(4) {
	case 0:
		return edge(r.mem.s.bytes), 0
	case 1:
		return 0, edge(r.mem.s.tenantBytes[tenant])
	}
	return 0, 0
}

// applyWorker applies the commands, alone or as one WorkerBatch, and checks
// each Result against the model's, item by item.
func (r *lifeRun) applyWorker(cmds []Command) {
	r.t.Helper()
	r.model.bytes, r.model.tenantBytes = r.mem.s.bytes, maps.Clone(r.mem.s.tenantBytes)
	var results []Result
	if len(cmds) == 1 {
		results = []Result{r.apply(Encode(cmds[0]))}
	} else {
		res := r.apply(Encode(WorkerBatch{Items: cmds}))
		if res.Outcome != OutcomeBatch || len(res.Items) != len(cmds) {
			r.t.Fatalf("batch: %v with %d items", res.Outcome, len(res.Items))
		}
		results = res.Items
	}
	for i, c := range cmds {
		var want Result
		switch c := c.(type) {
		case Lease:
			want = r.model.lease(c)
		case Heartbeat:
			want = r.model.heartbeat(c)
		case Complete:
			want = r.model.complete(c)
		case Fail:
			want = r.model.fail(c)
		}
		r.check(c, results[i], want)
		if results[i].Lease != nil && !results[i].Lease.Replayed {
			for _, j := range results[i].Lease.Jobs {
				r.leases = append(r.leases, [3]string{j.Tenant, j.ID, j.Life.LeaseID})
			}
		}
	}
}

// act applies a Cancel or a Retry of a job, under a key of its own.
func (r *lifeRun) act() {
	var ids [][2]string
	for k := range r.model.jobs {
		ids = append(ids, k)
	}
	if len(ids) == 0 {
		return
	}
	slices.SortFunc(ids, func(a, b [2]string) int { return cmpPair(a, b) })
	k := ids[r.rng.IntN(len(ids))]
	r.keyN++
	a := JobAction{Tenant: k[0], JobID: k[1], Key: fmt.Sprintf("act%d", r.keyN), Fingerprint: "f", Now: r.stamp(),
		MaxEntries: 100000}
	a.ExpiresAt = a.Now + 60*sec
	retry := r.rng.IntN(2) == 0
	var cmd Command = Cancel{a}
	if retry {
		cmd = Retry{a}
	}
	res := r.apply(Encode(cmd))
	want, j := r.model.action(a, retry)
	r.seen[fmt.Sprintf("%T %v", cmd, res.Outcome)]++
	if res.Outcome != want {
		r.t.Fatalf("entry %d: %T %s/%s: %v, the model says %v (job %+v)", r.idx, cmd, k[0], k[1], res.Outcome, want, res.Job)
	}
	if j != nil && !sameJob(res.Job, *j) {
		r.t.Fatalf("entry %d: %T: job\n%+v\nthe model's\n%+v", r.idx, cmd, res.Job, *j)
	}
}

func cmpPair(a, b [2]string) int {
	if a[0] != b[0] {
		if a[0] < b[0] {
			return -1
		}
		return 1
	}
	switch {
	case a[1] < b[1]:
		return -1
	case a[1] > b[1]:
		return 1
	}
	return 0
}

// check compares a Result with the model's.
func (r *lifeRun) check(c Command, got, want Result) {
	r.t.Helper()
	fail := func(what string) {
		r.t.Fatalf("entry %d: %T %+v: %s:\ngot  %+v\nwant %+v", r.idx, c, c, what, got, want)
	}
	if got.Outcome != want.Outcome || got.More != want.More {
		fail("outcome")
	}
	r.seen[fmt.Sprintf("%T %v", c, got.Outcome)]++
	if got.Lease != nil {
		r.seen["reclaimed"] += got.Lease.Reclaimed
		r.seen["dead"] += got.Lease.Dead
		r.seen["requeued"] += got.Lease.Requeued
		if got.Lease.Replayed {
			r.seen["replayed"]++
		}
	}
	if want.Lease != nil {
		g, w := *got.Lease, *want.Lease
		if g.Requeued != w.Requeued || g.Reclaimed != w.Reclaimed || g.Dead != w.Dead || g.Replayed != w.Replayed ||
			len(g.Jobs) != len(w.Jobs) {
			fail("lease counts")
		}
		for i := range g.Jobs {
			if !sameJob(g.Jobs[i], w.Jobs[i]) {
				fail(fmt.Sprintf("job %d handed out", i))
			}
		}
		return
	}
	if want.Outcome != OutcomeNotFound && !sameJob(got.Job, want.Job) {
		fail("job")
	}
}

// compareTables compares the whole job table of each FSM with the model's.
func (r *lifeRun) compareTables(step int) {
	r.t.Helper()
	fsms := map[string]*FSM{"memory": r.mem}
	if step%20 == 0 { // (results are compared at every entry)
		fsms["disk"] = r.disk
	}
	for name, f := range fsms {
		jobs := dumpTables(f).Jobs
		if len(jobs) != len(r.model.jobs) {
			r.t.Fatalf("step %d, entry %d: %s holds %d jobs, the model %d", step, r.idx, name, len(jobs), len(r.model.jobs))
		}
		for _, j := range jobs {
			w, ok := r.model.get(j.Tenant, j.ID)
			if !ok || !sameJob(j, *w) {
				r.t.Fatalf("step %d, entry %d: %s job\n%+v\nthe model's\n%+v", step, r.idx, name, j, w)
			}
		}
	}
	if step%40 == 0 {
		r.compareLists(step)
	}
}

// compareLists lists each tenant's jobs by state, a few a page, on both FSMs:
// every job of the model in that state, in Seq order.
func (r *lifeRun) compareLists(step int) {
	r.t.Helper()
	for _, tn := range lifeTenants {
		for st := JobQueued; st <= JobCancelled; st++ {
			var want []uint64
			for _, j := range r.model.sorted(func(j *Job) bool { return j.Tenant == tn && j.State() == st },
				func(a, b *Job) bool { return a.Seq < b.Seq }) {
				want = append(want, j.Seq)
			}
			for name, f := range map[string]*FSM{"memory": r.mem, "disk": r.disk} {
				var got []uint64
				after := uint64(0)
				for {
					page, next, more := f.ListJobs(tn, ListOptions{Status: st.String(), Limit: 3, After: after})
					for _, j := range page {
						got = append(got, j.Seq)
					}
					if !more {
						break
					}
					after = next
				}
				if !slices.Equal(got, want) {
					r.t.Fatalf("step %d: %s lists %s %s: %v, the model %v", step, name, tn, st, got, want)
				}
			}
		}
	}
}
