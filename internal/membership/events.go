package membership

import (
	"strconv"
	"sync"
)

// EventType says what happened to a member.
type EventType int

// Event types.
const (
	// EventJoin: a member appeared, or came back after leaving or failing.
	EventJoin EventType = iota + 1
	// EventUpdate: an alive member changed its Meta or address.
	EventUpdate
	// EventLeave: a member left gracefully (Pool.Leave).
	EventLeave
	// EventFailed: a member was declared dead.
	EventFailed
)

var eventTypeNames = [...]string{
	EventJoin:   "join",
	EventUpdate: "update",
	EventLeave:  "leave",
	EventFailed: "failed",
}

func (t EventType) String() string { return nameOf(eventTypeNames[:], int(t), "event") }

// nameOf is names[v], or kind(v) for a value without a name (the String of
// State, EventType and KeyringOp).
func nameOf(names []string, v int, kind string) string {
	if v >= 0 && v < len(names) && names[v] != "" {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(v) + ")"
}

// Event is a change of one member, carrying its state after the change.
type Event struct {
	Type   EventType
	Member Member
}

// subscriberBuffer is how many events a subscriber's channel holds before
// further events start coalescing.
const subscriberBuffer = 16

// Subscribe returns a channel of membership events and a function that ends
// the subscription (and closes the channel; safe to call more than once).
// Shutdown also closes it.
//
// Delivery never blocks memberlist. Events wait in a per-subscriber queue
// that keeps at most one event per member: while a subscriber is slow, a
// newer event for a member replaces the one still queued (a join followed by
// an update stays a join, carrying the newest Meta). So a subscriber sees,
// for each member, events in order and always the latest state, but not
// necessarily every intermediate one. Treat events as hints to re-read
// Members, which is the truth. A subscription starts empty: read Members
// after subscribing.
func (p *Pool) Subscribe() (<-chan Event, func()) {
	s := &subscriber{
		pending: make(map[string]Event),
		wake:    make(chan struct{}, 1),
		out:     make(chan Event, subscriberBuffer),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		close(s.out)
		return s.out, func() {}
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	go s.run()
	cancel := func() {
		p.mu.Lock()
		delete(p.subs, s)
		p.mu.Unlock()
		s.close()
	}
	return s.out, cancel
}

func (p *Pool) publishLocked(ev Event) {
	for s := range p.subs {
		s.push(ev)
	}
}

type subscriber struct {
	mu      sync.Mutex
	order   []string         // member names with a queued event, oldest first
	pending map[string]Event // the queued event of each

	wake      chan struct{} // capacity 1: "the queue is not empty"
	out       chan Event
	done      chan struct{}
	exited    chan struct{}
	closeOnce sync.Once
}

// push queues ev without blocking. It is called under Pool.mu, and only for
// the subscribers in Pool.subs: a subscriber is taken out of it, under that
// lock, before it is closed, so nothing is pushed after close.
func (s *subscriber) push(ev Event) {
	s.mu.Lock()
	name := ev.Member.Name
	if old, ok := s.pending[name]; ok {
		if old.Type == EventJoin && ev.Type == EventUpdate {
			ev.Type = EventJoin
		}
	} else {
		s.order = append(s.order, name)
	}
	s.pending[name] = ev
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) pop() (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.order) == 0 {
		return Event{}, false
	}
	name := s.order[0]
	s.order[0] = ""
	s.order = s.order[1:]
	if len(s.order) == 0 {
		s.order = nil // let the backing array go
	}
	ev := s.pending[name]
	delete(s.pending, name)
	return ev, true
}

func (s *subscriber) run() {
	defer close(s.exited)
	defer close(s.out)
	for {
		ev, ok := s.pop()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		select {
		case s.out <- ev:
		case <-s.done:
			return
		}
	}
}

// close stops the delivery goroutine and waits for it; the channel is
// closed when it returns.
func (s *subscriber) close() {
	s.closeOnce.Do(func() { close(s.done) })
	<-s.exited
}
