package manager

import (
	"sync"

	"github.com/once-dev/once/internal/ledger"
)

// waiters lets submissions wait for an entry of a (tenant, key) to change. The
// FSM calls notify from Apply (via ledger.Options.OnChange): it must not block,
// and it does not: it closes a channel under a short lock.
//
// A waiter registers first and reads the FSM second, so a change applied between
// the two is never missed: either the read sees it, or the channel is closed
// after the registration.
type waiters struct {
	mu    sync.Mutex
	slots map[string]chan struct{}
}

func newWaiters() *waiters { return &waiters{slots: map[string]chan struct{}{}} }

func slotKey(tenant, key string) string { return tenant + "\x00" + key }

// watch returns a channel closed at the next change of (tenant, key).
func (w *waiters) watch(tenant, key string) <-chan struct{} {
	k := slotKey(tenant, key)
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.slots[k]
	if !ok {
		ch = make(chan struct{})
		w.slots[k] = ch
	}
	return ch
}

// notify wakes every watcher of the changed entry (all of them on a Restore).
func (w *waiters) notify(c ledger.Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.Kind == ledger.ChangeRestored {
		for k, ch := range w.slots {
			close(ch)
			delete(w.slots, k)
		}
		return
	}
	k := slotKey(c.Entry.Tenant, c.Entry.Key)
	if ch, ok := w.slots[k]; ok {
		close(ch)
		delete(w.slots, k)
	}
}

// broadcast wakes every waiter at once: wait returns a channel that the next
// fire closes. As with waiters, a waiter takes the channel first and reads
// the state second, so a fire between the two is never missed.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// fire wakes the waiters; it never blocks (the FSM calls it from Apply).
func (b *broadcast) fire() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// resolvingSet holds the (tenant, key)s a live submission on this leader is
// reserving or resolving, so that the orphan sweep leaves them to it.
type resolvingSet struct {
	mu   sync.Mutex
	keys map[string]int
}

func (r *resolvingSet) add(tenant, key string) {
	r.mu.Lock()
	if r.keys == nil {
		r.keys = map[string]int{}
	}
	r.keys[slotKey(tenant, key)]++
	r.mu.Unlock()
}

func (r *resolvingSet) done(tenant, key string) {
	k := slotKey(tenant, key)
	r.mu.Lock()
	if r.keys[k]--; r.keys[k] <= 0 {
		delete(r.keys, k)
	}
	r.mu.Unlock()
}

func (r *resolvingSet) has(tenant, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[slotKey(tenant, key)] > 0
}
