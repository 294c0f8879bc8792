package manager

import (
	"io"
	"testing"

	"github.com/once-dev/once/internal/config"
)

// TestLedgerByteBudgetDefaults: the ledger's byte budgets default by store:
// a day of 1,000 jobs/s of one tenant fits the disk store's tenant share, the
// memory store keeps the budgets of a 2-4 GiB manager, and a value given wins
// over both.
func TestLedgerByteBudgetDefaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		env           map[string]string
		total, tenant int64
	}{
		{"disk by default", nil, 256 << 30, 64 << 30},
		{"memory", map[string]string{EnvLedgerStore: "memory"}, 1 << 30, 256 << 20},
		{"given", map[string]string{EnvLedgerStore: "memory", EnvLedgerMaxBytes: "4294967296", EnvLedgerTenantMaxBytes: "1073741824"}, 4 << 30, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfig(nil, config.MapLookup(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.LedgerMaxBytes != tc.total || c.LedgerTenantMaxBytes != tc.tenant {
				t.Fatalf("budgets %d / %d, want %d / %d", c.LedgerMaxBytes, c.LedgerTenantMaxBytes, tc.total, tc.tenant)
			}
		})
	}
	// A day of 1,000 jobs/s of one tenant, each job its overhead and 400
	// bytes of payload and result, within the disk store's tenant share.
	const day = 86400 * 1000
	if _, tenant := DefaultLedgerBudgets("disk"); int64(day)*(384+400) > tenant {
		t.Fatalf("a day at 1,000 jobs/s needs %d bytes, the tenant's default is %d", int64(day)*(384+400), tenant)
	}
	d := DefaultConfig()
	if total, _ := DefaultLedgerBudgets(d.LedgerStore); d.LedgerMaxBytes != total {
		t.Fatalf("DefaultConfig's budget %d", d.LedgerMaxBytes)
	}
}
