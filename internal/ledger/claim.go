package ledger

// Claims: an omitted datacenters list in a federation (docs/multidc.md,
// "An omitted list in a federation"). A submission that names no datacenter
// runs in one datacenter, its home; every other datacenter of the federation
// holds a claim on the key, so that a retry through any of their gates finds
// the key taken and is sent home instead of making a second job there.

// Claim inserts a CLAIMED entry for (Tenant, Key) unless one is live: the key
// is held for the job JobID that runs in datacenter Home, never here. The
// entry stores the request's Type and Home (Request.Datacenters = [Home]),
// not its payload; it queues no job, counts against MaxEntries and the byte
// budgets as an entry without a payload, and expires at ExpiresAt.
//
// Semantics, in this order:
//  1. An entry of the key that is due (ExpiresAt <= Now) is removed first, with
//     exactly Expire's effects. A live claim with the same Fingerprint for a
//     home whose name sorts after Home gives way: this claim takes its place
//     (its entry and bytes count as freed in step 3), and it is removed only
//     when this one is inserted (step 4); a refusal in step 3 leaves it.
//  2. A live entry with the same Fingerprint: OutcomeExists (a claim of this
//     Home or of a home that sorts before it, or this datacenter's own
//     entry); another fingerprint: OutcomeKeyReused. Both return the entry;
//     nothing changes.
//  3. When the table holds MaxEntries entries or more, or the bytes are short,
//     due entries are removed earliest first (at most a few); if still at the
//     bound: OutcomeFull, OutcomeTenantBytesFull or OutcomeBytesFull.
//  4. Otherwise the CLAIMED entry is inserted: OutcomeClaimed.
//
// A structured key's watermark is neither checked nor touched: the home
// datacenter's ledger judges the key's sequence.
type Claim struct {
	Tenant      string
	Key         string
	Fingerprint string
	JobID       string
	// Home is the datacenter the job runs in; not empty.
	Home string
	// Type is the job type, kept for reads.
	Type string
	// Now is the leader's clock; ExpiresAt, after it, the claim's end (the
	// expiry basis + the committed TTL, as the home's entry).
	Now       int64
	ExpiresAt int64
	// The bounds, as Reserve's; 0 for "no bound" but MaxEntries, at least 1.
	MaxEntries     uint64
	MaxBytes       uint64
	MaxTenantBytes uint64
}

// Release removes the live CLAIMED entry of (Tenant, Key) whose home is Home
// and whose fingerprint is Fingerprint (OutcomeReleased); anything else is
// left as it is (OutcomeUnchanged with the entry, or OutcomeNotFound). The
// leader proposes it before reserving the key for a job of its own
// datacenter that wins the key over Home's claim.
type Release struct {
	Tenant      string
	Key         string
	Fingerprint string
	Home        string
	Now         int64
}

// GivesWayTo reports whether e is a claim that a Claim of the same request
// (fingerprint) for home replaces: its own home sorts after home. Claims of
// one request so converge on the home that sorts first, so that one home
// always ends up holding a claim in every other datacenter, and two homes
// that raced never leave the key held by neither (docs/multidc.md, "Why one
// job at most"). A datacenter's own entry never gives way, nor does a claim
// for a home that sorts first. The manager reads it too, to know that a
// claim it finds is no answer.
func (e Entry) GivesWayTo(fingerprint, home string) bool {
	return e.State == StateClaimed && e.Fingerprint == fingerprint && home < e.Home()
}

func (Claim) CommandType() CommandType   { return TypeClaim }
func (Release) CommandType() CommandType { return TypeRelease }

func (c Claim) stamp() int64   { return c.Now }
func (r Release) stamp() int64 { return r.Now }

func (c Claim) sizeHint() int {
	return len(c.Tenant) + len(c.Key) + len(c.Fingerprint) + len(c.JobID) + len(c.Home) + len(c.Type) + 10*varintSize
}

// Claim body:
//
//	tenant string, key string, fingerprint string, job_id string, home string,
//	type string, now int64, expires_at int64,
//	max_entries uvarint, max_bytes uvarint, max_tenant_bytes uvarint
func (c Claim) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.Key)
	b = appendString(b, c.Fingerprint)
	b = appendString(b, c.JobID)
	b = appendString(b, c.Home)
	b = appendString(b, c.Type)
	b = appendInt64(b, c.Now)
	b = appendInt64(b, c.ExpiresAt)
	b = appendUvarint(b, c.MaxEntries)
	b = appendUvarint(b, c.MaxBytes)
	return appendUvarint(b, c.MaxTenantBytes)
}

func decodeClaim(d *decoder) Claim {
	return Claim{Tenant: d.string(), Key: d.string(), Fingerprint: d.string(), JobID: d.string(), Home: d.string(),
		Type: d.string(), Now: d.int64(), ExpiresAt: d.int64(), MaxEntries: d.uvarint(), MaxBytes: d.uvarint(),
		MaxTenantBytes: d.uvarint()}
}

func (r Release) sizeHint() int {
	return len(r.Tenant) + len(r.Key) + len(r.Fingerprint) + len(r.Home) + 6*varintSize
}

// Release body:
//
//	tenant string, key string, fingerprint string, home string, now int64
func (r Release) appendBody(b []byte) []byte {
	b = appendString(b, r.Tenant)
	b = appendString(b, r.Key)
	b = appendString(b, r.Fingerprint)
	b = appendString(b, r.Home)
	return appendInt64(b, r.Now)
}

func decodeRelease(d *decoder) Release {
	return Release{Tenant: d.string(), Key: d.string(), Fingerprint: d.string(), Home: d.string(), Now: d.int64()}
}

func (c Claim) apply(s *state, ax *applyCtx) Result {
	switch {
	case c.Tenant == "" || c.Key == "" || c.JobID == "" || c.Home == "":
		return invalidf("claim: empty tenant, key, job ID or home")
	case c.ExpiresAt <= c.Now:
		return invalidf("claim: expires_at %d not after now %d", c.ExpiresAt, c.Now)
	case c.MaxEntries == 0:
		return invalidf("claim: max_entries is 0")
	}
	var res Result
	// A live claim that gives way is replaced: removed once room is made
	// (it frees the entry and the bytes this one takes), so a refusal
	// leaves it and the key is never held by neither home.
	var replaces *Entry
	if e, ok := s.getEntry(c.Tenant, c.Key); ok && e.ExpiresAt > c.Now && e.GivesWayTo(c.Fingerprint, c.Home) {
		replaces = e
	} else if s.answerLive(ax, c.Tenant, c.Key, c.Fingerprint, c.Now, &res) {
		return res
	}
	r := room{tenant: c.Tenant, cost: entryBytes(0), maxEntries: c.MaxEntries, maxBytes: c.MaxBytes, maxTenantBytes: c.MaxTenantBytes,
		replaces: replaces}
	if res.Outcome = s.makeRoom(ax, r, c.Now, &res.Removed); res.Outcome != 0 {
		return res
	}
	if replaces != nil {
		s.removeEntry(ax, replaces, c.Now, &res.Removed)
	}
	e := s.recordKey(c.Tenant, c.Key, c.Fingerprint, c.JobID, StateClaimed, c.Now, c.ExpiresAt,
		Request{Type: c.Type, Datacenters: []string{c.Home}})
	ax.emit(ChangeClaimed, e)
	res.Outcome = OutcomeClaimed
	res.Entry = *e
	return res
}

// recordKey inserts the entry a Claim, Cancel or Retry takes its key with:
// reserved and resolved at once, at now.
func (s *state) recordKey(tenant, key, fingerprint, jobID string, st State, now, expiresAt int64, req Request) *Entry {
	e := &Entry{Tenant: tenant, Key: key, Fingerprint: fingerprint, State: st, JobID: jobID,
		ReservedAt: now, ResolvedAt: now, ExpiresAt: expiresAt, Request: req}
	s.insertEntry(e)
	return e
}

func (c Release) apply(s *state, ax *applyCtx) Result {
	if c.Tenant == "" || c.Key == "" || c.Home == "" {
		return invalidf("release: empty tenant, key or home")
	}
	e, ok := s.getEntry(c.Tenant, c.Key)
	if !ok {
		return Result{Outcome: OutcomeNotFound}
	}
	if e.State != StateClaimed || e.Home() != c.Home || e.Fingerprint != c.Fingerprint || e.ExpiresAt <= c.Now {
		return Result{Outcome: OutcomeUnchanged, Entry: *e, Job: s.jobOf(e)}
	}
	res := Result{Outcome: OutcomeReleased, Entry: *e}
	s.removeEntry(ax, e, c.Now, &res.Removed)
	return res
}
