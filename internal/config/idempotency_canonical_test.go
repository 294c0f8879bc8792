package config

import (
	"reflect"
	"testing"
	"time"
)

func TestCanonicalAndDiff(t *testing.T) {
	a := DefaultIdempotency()
	if got, want := a.Canonical(), "pending_ttl=60 committed_ttl=300 rejected_ttl=60 wait_for_pending=true pending_wait_timeout=30"; got != want {
		t.Fatalf("Canonical = %q, want %q", got, want)
	}
	b := a
	b.CommittedTTL = 90 * time.Second
	b.WaitForPending = false
	b.MaxEntries = 7 // a gate's own bound: not compared
	got := DiffCanonical(a.Canonical(), b.Canonical())
	want := []SettingDiff{
		{Setting: EnvCommittedTTL, Local: "300", Remote: "90"},
		{Setting: EnvWaitForPending, Local: "true", Remote: "false"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DiffCanonical = %+v, want %+v", got, want)
	}
	if d := DiffCanonical(a.Canonical(), a.Canonical()); d != nil {
		t.Fatalf("equal settings differ: %+v", d)
	}
	// A setting the other side does not publish is not compared.
	if d := DiffCanonical(a.Canonical(), "pending_ttl=60 future_setting=1"); d != nil {
		t.Fatalf("partial remote: %+v", d)
	}
	// The pending wait is used only when waiting is on: two nodes that
	// both do not wait agree whatever their timeouts, one that waits
	// differs from one that does not in both settings.
	c, d := b, b
	c.CommittedTTL, d.CommittedTTL = a.CommittedTTL, a.CommittedTTL
	c.PendingWaitTimeout, d.PendingWaitTimeout = 5*time.Second, 10*time.Second
	if diff := DiffCanonical(c.Canonical(), d.Canonical()); diff != nil {
		t.Fatalf("waiting off on both sides, another wait timeout: %+v", diff)
	}
	got = DiffCanonical(a.Canonical(), c.Canonical())
	want = []SettingDiff{
		{Setting: EnvWaitForPending, Local: "true", Remote: "false"},
		{Setting: EnvPendingWaitTimeout, Local: "30", Remote: "5"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DiffCanonical = %+v, want %+v", got, want)
	}
	if d := DiffCanonical(a.Canonical(), ""); d != nil {
		t.Fatalf("nothing published: %+v", d)
	}
}
