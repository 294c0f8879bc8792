// Package cache is the gate's idempotency cache (see docs/architecture.md and
// docs/cache.md): a bounded LRU of idempotency entries, each with its expiry,
// and coalescing of concurrent duplicates.
//
// The gate calls Begin on every POST /v1/jobs with the tenant-scoped key (see Key)
// and the request fingerprint, and acts on the Lookup it gets:
//
//	LookupHit      replay Lookup.Value (a COMMITTED or REJECTED outcome)
//	LookupMismatch 422 idempotency_key_reused
//	LookupPending  Lookup.Waiter.Wait(ctx) for the owner's outcome, or 409
//	LookupMiss     the caller is the owner: forward, then Lookup.Owner.CompleteUntil
//	               (a deterministic outcome, cached) or Lookup.Owner.Abandon
//	               (a transient failure, not cached)
//
// Entries live in github.com/hashicorp/golang-lru/v2/simplelru lists under the
// cache's own locks, split in shards by key hash. Each shard keeps two LRU lists,
// one of PENDING entries and one of completed entries, so that eviction prefers a
// completed entry to a pending one in O(1). Every entry carries its own done
// channel, closed exactly once when the owner resolves it: waiters select on it,
// so no wake-up can be missed and an entry that left the cache (evicted, swept,
// expired) still wakes its waiters. docs/cache.md has the full account.
//
// New starts a sweeper goroutine that removes expired entries every
// CleanupInterval; Close stops it and waits for it to exit.
package cache

import (
	"hash/maphash"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// State is the state of an entry.
type State uint8

// Entry states. PENDING → COMMITTED | REJECTED (cached until their TTL) or
// PENDING → ABANDONED (never cached: the entry leaves the cache at once).
const (
	Pending State = iota + 1
	Committed
	Rejected
	Abandoned
)

var stateNames = [...]string{Pending: "pending", Committed: "committed", Rejected: "rejected", Abandoned: "abandoned"}

// String returns the state's name as the API spells it ("pending", ...).
func (s State) String() string { return name(stateNames[:], s, "State") }

// name is names[i], or kind(i) for a value with no name.
func name[T ~uint8](names []string, i T, kind string) string {
	if int(i) < len(names) && names[i] != "" {
		return names[i]
	}
	return kind + "(" + strconv.Itoa(int(i)) + ")"
}

// Kind says which case Begin found.
type Kind uint8

// The four answers of Begin.
const (
	// LookupMiss: nothing (or only an expired entry) was there. A PENDING entry
	// was inserted and the caller is its owner (Lookup.Owner).
	LookupMiss Kind = iota + 1
	// LookupHit: a COMMITTED or REJECTED entry with the same fingerprint.
	LookupHit
	// LookupPending: a PENDING entry with the same fingerprint; Lookup.Waiter
	// waits for its outcome.
	LookupPending
	// LookupMismatch: an entry (any state) with a different fingerprint.
	// Nothing changed.
	LookupMismatch
)

var kindNames = [...]string{LookupMiss: "miss", LookupHit: "hit", LookupPending: "pending", LookupMismatch: "mismatch"}

// String returns the kind's name ("miss", "hit", "pending", "mismatch").
func (k Kind) String() string { return name(kindNames[:], k, "Kind") }

// Lookup is the answer of Begin.
type Lookup[V any] struct {
	Kind Kind

	// Value is the cached outcome (LookupHit only). It is shared with every
	// other reader of the entry: treat it as immutable.
	Value V

	// State is the entry's state: Committed or Rejected (LookupHit), Pending
	// (LookupPending, LookupMiss), the existing entry's state (LookupMismatch).
	State State

	// ExpiresAt is when the entry found (or, for LookupMiss, inserted) expires.
	// For a hit on a REJECTED entry, ExpiresAt minus now is the Retry-After.
	ExpiresAt time.Time

	// Owner is set for LookupMiss only: the caller must resolve the entry with
	// CompleteUntil or Abandon (an owner that never does is bounded by PendingTTL).
	Owner *Owner[V]

	// Waiter is set for LookupPending only. The caller may Wait on it or drop
	// it: no registration is made, so nothing needs releasing.
	Waiter *Waiter[V]
}

// Config configures a Cache. Every field but Now and Shards is required.
type Config struct {
	// MaxEntries bounds the number of entries (PENDING and completed) in the
	// cache (IDEMPOTENCY_MAX_ENTRIES).
	MaxEntries int

	// PendingTTL bounds how long a PENDING entry answers duplicates: after it
	// the entry is expired and the next Begin becomes a new owner.
	PendingTTL time.Duration
	// CleanupInterval is the period of the sweeper that removes expired
	// entries. Expired entries are also ignored (and removed) on lookup, so the
	// sweep only reclaims memory.
	CleanupInterval time.Duration

	// MaxBytes, when positive, bounds the bytes of the completed entries
	// (IDEMPOTENCY_MAX_BYTES), as Size counts them, over the whole cache (not
	// split over the shards). An outcome that does not fit (after removing
	// its shard's expired completed entries) is not cached: its waiters get it all the same, and a later
	// duplicate is forwarded to the ledger, which answers it. Size is then
	// required.
	MaxBytes int64
	// Size returns the accounted size of a value (a V: its bytes plus a fixed
	// overhead); it is called once per CompleteUntil, outside the cache's locks.
	Size func(value any) int64

	// Now is the clock (default time.Now). Tests inject a fake one.
	Now func() time.Time

	// Shards is the number of independently locked LRU shards: 0 chooses (16,
	// halved until each shard holds at least 1024 entries), else a power of two
	// from 1 to 256, at most MaxEntries. LRU order is per shard.
	Shards int

	// Test hooks: the sweeper's ticker, and a callback after each tick's sweep.
	newTicker func(time.Duration) (<-chan time.Time, func())
	swept     func(removed int)
}

const (
	autoShards      = 16
	maxShards       = 256
	minPerAutoShard = 1024
)

func (cfg *Config) validate() error {
	if cfg.MaxEntries < 1 {
		return &ConfigError{Field: "MaxEntries", Value: cfg.MaxEntries, Want: "at least 1"}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PendingTTL", cfg.PendingTTL},
		{"CleanupInterval", cfg.CleanupInterval},
	} {
		if d.v <= 0 {
			return &ConfigError{Field: d.name, Value: d.v, Want: "a positive duration"}
		}
	}
	if cfg.MaxBytes < 0 || (cfg.MaxBytes > 0 && cfg.Size == nil) {
		return &ConfigError{Field: "MaxBytes", Value: cfg.MaxBytes, Want: "0 (no byte bound) or a positive count with a Size function"}
	}
	if n := cfg.Shards; n != 0 && (n < 1 || n > maxShards || n&(n-1) != 0 || n > cfg.MaxEntries) {
		return &ConfigError{Field: "Shards", Value: n,
			Want: "0 (automatic) or a power of two from 1 to 256, at most MaxEntries"}
	}
	return nil
}

// Cache is the gate's idempotency cache. All methods are safe for concurrent
// use. Create it with New; Close it to stop its sweeper.
type Cache[V any] struct {
	cfg    Config
	now    func() time.Time
	seed   maphash.Seed
	shift  uint // key hash >> shift selects the shard (64 with one shard)
	shards []shard[V]
	// bytes is the sum of the sizes of the completed entries of every shard,
	// at most cfg.MaxBytes when that is positive: room is taken under a
	// shard's lock with a compare-and-swap, and given back by removals.
	bytes atomic.Int64

	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

// shard is one lock and the two LRU lists under it. A key is in at most one of
// the lists; pending.Len()+done.Len() <= capacity.
type shard[V any] struct {
	mu       sync.Mutex
	c        *Cache[V]
	capacity int
	pending  *simplelru.LRU[string, *entry[V]] // PENDING, oldest first = inserted first
	done     *simplelru.LRU[string, *entry[V]] // COMMITTED and REJECTED, by recency
	stats    counters
	_        [64]byte // keeps the next shard's lock off this shard's cache lines
}

// entry is one idempotency entry. It may outlive its place in the cache: owner
// and waiters hold it until it is resolved.
type entry[V any] struct {
	key, fp string
	s       *shard[V]
	done    chan struct{} // closed exactly once, by the resolving call

	// Guarded by s.mu while state is Pending. Written for the last time, under
	// s.mu, before done is closed; read-only afterwards (so a reader that saw
	// done closed may read them without the lock).
	state   State
	value   V
	expires time.Time
	size    int64 // accounted bytes while in the done list
}

// New validates cfg, builds the cache and starts its sweeper.
func New[V any](cfg Config) (*Cache[V], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := cfg.Shards
	if n == 0 {
		n = autoShards
		for n > 1 && cfg.MaxEntries/n < minPerAutoShard {
			n /= 2
		}
	}
	c := &Cache[V]{
		cfg:     cfg,
		now:     cfg.Now,
		seed:    maphash.MakeSeed(),
		shift:   uint(64 - bits.TrailingZeros(uint(n))),
		shards:  make([]shard[V], n),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.c = c
		// The entries are split as evenly as possible; the sum is MaxEntries.
		s.capacity = cfg.MaxEntries / n
		if i < cfg.MaxEntries%n {
			s.capacity++
		}
		// The lists never evict by themselves: total <= capacity <= their size.
		s.pending, _ = simplelru.NewLRU[string, *entry[V]](s.capacity, nil)
		// Every removal from done (eviction, expiry, sweep) gives its
		// bytes back; the lists are only used under s.mu.
		s.done, _ = simplelru.NewLRU[string, *entry[V]](s.capacity, func(_ string, e *entry[V]) { c.bytes.Add(-e.size) })
	}
	newTicker := cfg.newTicker
	if newTicker == nil {
		newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stopTick := newTicker(cfg.CleanupInterval)
	go c.sweeper(tick, stopTick)
	return c, nil
}

// Close stops the sweeper and waits for it to exit. It is idempotent. The cache
// stays usable after Close (expired entries are still ignored on lookup and
// evicted under pressure); only the periodic sweep stops.
func (c *Cache[V]) Close() {
	c.closeOnce.Do(func() { close(c.stop) })
	<-c.stopped
}

func (c *Cache[V]) sweeper(tick <-chan time.Time, stopTick func()) {
	defer close(c.stopped)
	defer stopTick()
	for {
		select {
		case <-c.stop:
			return
		case <-tick:
			n := c.Sweep()
			if c.cfg.swept != nil {
				c.cfg.swept(n)
			}
		}
	}
}

// Key scopes an idempotency key by tenant: the key the gate passes to Begin
// and Replay. Distinct (tenant, key) pairs give distinct results whatever
// characters they contain.
func Key(tenant, idempotencyKey string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + ":" + idempotencyKey
}

func (c *Cache[V]) shardFor(key string) *shard[V] {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[maphash.String(c.seed, key)>>c.shift]
}

// expired reports whether e has expired at now (an entry lives in [insert, expires)).
func (e *entry[V]) expired(now time.Time) bool { return !now.Before(e.expires) }

// Begin looks key up and acts on what it finds, atomically (O(1)):
//   - a COMMITTED or REJECTED entry, unexpired, same fingerprint: LookupHit;
//   - an unexpired entry of any state with another fingerprint: LookupMismatch,
//     and nothing changes;
//   - a PENDING entry, unexpired, same fingerprint: LookupPending with a Waiter;
//   - nothing, or an expired entry: LookupMiss. A PENDING entry is inserted
//     (evicting one if the cache is full) and the caller owns it.
func (c *Cache[V]) Begin(key, fingerprint string) Lookup[V] {
	now := c.now()
	s := c.shardFor(key)
	s.mu.Lock()
	if e, ok := s.live(key, now); ok {
		l := Lookup[V]{State: e.state, ExpiresAt: e.expires}
		var counter *atomic.Uint64
		switch {
		case e.fp != fingerprint:
			l.Kind, counter = LookupMismatch, &s.stats.mismatches
		case e.state == Pending:
			// Its recency is not refreshed: the pending list stays in
			// insertion order, so its oldest is the longest-pending entry.
			l.Kind, l.Waiter, counter = LookupPending, (*Waiter[V])(e), &s.stats.waits
		default:
			s.done.Get(key) // refresh its recency
			l.Kind, l.Value, counter = LookupHit, e.value, &s.stats.hits
		}
		s.mu.Unlock()
		counter.Add(1)
		return l
	}
	e := &entry[V]{
		key:     key,
		fp:      fingerprint,
		s:       s,
		done:    make(chan struct{}),
		state:   Pending,
		expires: now.Add(c.cfg.PendingTTL),
	}
	s.makeRoom(now)
	s.pending.Add(key, e)
	s.mu.Unlock()
	s.stats.misses.Add(1)
	return Lookup[V]{Kind: LookupMiss, State: Pending, ExpiresAt: e.expires, Owner: (*Owner[V])(e)}
}

// Replay returns the outcome stored under key when it is COMMITTED or
// REJECTED, unexpired, and same(value) holds; it counts and refreshes the
// entry as Begin's LookupHit does. Otherwise it returns false and changes
// nothing (not even the statistics): the caller goes on with Begin. It lets a
// caller that can recognise its own earlier request more cheaply than by its
// fingerprint (the gate compares the raw body's hash) skip computing one.
// same runs under the shard's lock: it must be cheap and must not call the
// cache.
func (c *Cache[V]) Replay(key string, same func(V) bool) (Lookup[V], bool) {
	now := c.now()
	s := c.shardFor(key)
	s.mu.Lock()
	e, ok := s.done.Peek(key)
	if !ok || e.expired(now) || !same(e.value) {
		s.mu.Unlock()
		return Lookup[V]{}, false
	}
	s.done.Get(key) // refresh its recency
	l := Lookup[V]{Kind: LookupHit, Value: e.value, State: e.state, ExpiresAt: e.expires}
	s.mu.Unlock()
	s.stats.hits.Add(1)
	return l, true
}

// makeRoom frees one slot if the shard is full, in O(1): an expired oldest entry
// if there is one, else the least recently used completed entry, else (only
// PENDING entries left) the oldest PENDING entry. s.mu is held.
func (s *shard[V]) makeRoom(now time.Time) {
	if s.pending.Len()+s.done.Len() < s.capacity || s.dropExpiredOldest(s.done, now) || s.dropExpiredOldest(s.pending, now) {
		return
	}
	if s.done.Len() > 0 {
		s.done.RemoveOldest()
		s.stats.evictions.Add(1)
		return
	}
	// An evicted PENDING entry lives on for its owner and waiters: the owner's
	// CompleteUntil still wakes them, it just is not cached.
	s.pending.RemoveOldest()
	s.stats.evictions.Add(1)
	s.stats.pendingEvictions.Add(1)
}

// live returns the unexpired entry under key, from either list. An expired
// one leaves the cache (counted as an expiration); an expired PENDING entry
// means its owner overran PendingTTL, and its own waiters keep it. s.mu is
// held.
func (s *shard[V]) live(key string, now time.Time) (*entry[V], bool) {
	l := s.done
	e, ok := l.Peek(key)
	if !ok {
		l = s.pending
		if e, ok = l.Peek(key); !ok {
			return nil, false
		}
	}
	if e.expired(now) {
		l.Remove(key)
		s.stats.expirations.Add(1)
		return nil, false
	}
	return e, true
}

// Len returns the number of entries, expired ones not yet swept included.
func (c *Cache[V]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.pending.Len() + s.done.Len()
		s.mu.Unlock()
	}
	return n
}

// Sweep removes every expired entry now and returns how many it removed. The
// sweeper calls it every CleanupInterval; it locks one shard at a time and is
// O(entries in the shard) under that lock.
func (c *Cache[V]) Sweep() int {
	now := c.now()
	n := 0
	for i := range c.shards {
		n += c.shards[i].sweep(now)
	}
	return n
}

func (s *shard[V]) sweep(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range [...]*simplelru.LRU[string, *entry[V]]{s.pending, s.done} {
		for _, e := range l.Values() {
			if e.expired(now) {
				l.Remove(e.key)
				n++
			}
		}
	}
	s.stats.expirations.Add(uint64(n))
	return n
}

// fits reports whether size more bytes fit the cache's byte bound, and if so
// counts them. It removes the shard's expired completed entries (oldest
// first) to make room; the other shards' give their bytes back when they are
// looked up, evicted or swept. s.mu is held.
func (s *shard[V]) fits(size int64, now time.Time) bool {
	limit := s.c.cfg.MaxBytes
	if limit == 0 {
		return true
	}
	for {
		cur := s.c.bytes.Load()
		switch {
		case cur+size <= limit:
			if s.c.bytes.CompareAndSwap(cur, cur+size) {
				return true
			}
		case !s.dropExpiredOldest(s.done, now):
			return false
		}
	}
}

// dropExpiredOldest removes l's oldest entry if it has expired at now
// (counted as an expiration), and reports whether it did. s.mu is held.
func (s *shard[V]) dropExpiredOldest(l *simplelru.LRU[string, *entry[V]], now time.Time) bool {
	if _, e, ok := l.GetOldest(); !ok || !e.expired(now) {
		return false
	}
	l.RemoveOldest()
	s.stats.expirations.Add(1)
	return true
}

// resolve moves e out of PENDING, once: it records the outcome, moves e from the
// pending list to the completed list (or out of the cache, for Abandoned) if e
// is still the live entry of its key, and closes done, which wakes every waiter
// that is or will ever be waiting on e.
//
// A Size that panics does not leave e PENDING: the outcome is resolved as one
// that does not fit (its waiters get it, nothing is cached), and the panic
// goes on in the resolving call once done is closed.
func (e *entry[V]) resolve(v V, state State, expires time.Time) error {
	s := e.s
	var size int64
	var sizePanic any
	if s.c.cfg.MaxBytes > 0 && state != Abandoned {
		size, sizePanic = s.c.size(v)
	}
	s.mu.Lock()
	if e.state != Pending {
		s.mu.Unlock()
		return ErrResolved
	}
	now := s.c.now()
	if state != Abandoned {
		// The expiry is kept on the cache's clock: now plus the time left.
		// One read from a wall clock alone (the ledger's Unix expiry, with
		// no monotonic reading) would otherwise be compared by wall time,
		// and a step of the wall clock backwards would keep the entry past
		// the ledger's expiry; from now on it moves with the clock's
		// monotonic reading (time.Now has one), like every other entry.
		expires = now.Add(expires.Sub(now))
	}
	e.value, e.state, e.expires = v, state, expires
	if cur, ok := s.pending.Peek(e.key); ok && cur == e {
		s.pending.Remove(e.key)
		// An outcome already expired is never cached: a duplicate would be
		// answered from an entry past its own expiry.
		if state != Abandoned && sizePanic == nil && !e.expired(now) && s.fits(size, now) {
			// The key was in the pending list, so it is not in done and the
			// shard's total is unchanged: no eviction. fits counted
			// the bytes.
			e.size = size
			s.done.Add(e.key, e)
		} else if state != Abandoned {
			s.stats.notCached.Add(1)
		}
	}
	s.mu.Unlock()
	close(e.done)
	if sizePanic != nil {
		panic(sizePanic)
	}
	return nil
}

// size is cfg.Size(v), or the value it panicked with.
func (c *Cache[V]) size(v V) (n int64, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return c.cfg.Size(v), nil
}
