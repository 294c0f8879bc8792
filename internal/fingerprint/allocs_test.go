//go:build !race

package fingerprint

import (
	"strings"
	"testing"
)

// TestCanonicalizeAllocationsDoNotGrowWithObjects: the objects of a text
// share one stack of members and one scratch buffer, so a text of many
// objects (unsorted, nested) allocates as often as a text of one. The
// race detector's instrumentation would falsify the counts (docs/testing.md).
func TestCanonicalizeAllocationsDoNotGrowWithObjects(t *testing.T) {
	body := func(n int) []byte {
		items := make([]string, n)
		for i := range items {
			items[i] = `{"z":1,"b":{"y":[true],"a":null},"a":"x"}`
		}
		return []byte(`{"type":"t","items":[` + strings.Join(items, ",") + `]}`)
	}
	one, many := body(1), body(200)
	allocs := func(b []byte) float64 {
		return testing.AllocsPerRun(50, func() {
			if _, _, err := CanonicalizeObject(b); err != nil {
				t.Fatal(err)
			}
		})
	}
	if a1, an := allocs(one), allocs(many); an != a1 {
		t.Fatalf("canonicalizing 1 object allocates %v times, 200 objects %v times", a1, an)
	}
}
