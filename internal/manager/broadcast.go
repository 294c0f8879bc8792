package manager

import "sync"

// broadcast wakes every waiter at once: wait returns a channel that the next
// fire closes. A waiter takes the channel first and reads
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

// slot is (tenant, key) as one map key: a struct of the two strings, so a
// look-up builds no string.
type slot struct{ tenant, key string }
