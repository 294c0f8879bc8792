package engine

import "testing"

// TestCountKeys: the counts of a store opened with keys are scanned in the
// background and merged at the next Begin with what was added meanwhile;
// then a key of the prefixes counted that is not live is absent, and the
// counts are exactly the live keys'.
func TestCountKeys(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if c := st.CountKeys(0, 'e', 'j'); !c.Ready() || !c.Absent([]byte("e1")) {
		t.Fatal("the counts of an empty store are not ready, or count a key")
	}
	st.Begin()
	for _, k := range []string{"e1", "e2", "j1", "x1"} {
		st.Set([]byte(k), []byte("v"))
	}
	st.Commit()

	c := st.CountKeys(3, 'e', 'j') // as when the store is opened again
	if c.Ready() || c.Absent([]byte("e9")) {
		t.Fatal("counts ready before their scan is merged")
	}
	c.Add([]byte("e3"), 1) // while the scan may run: kept as a difference
	c.ScanDone()
	st.Begin() // merges the scan
	if !c.Ready() {
		t.Fatal("counts not merged at Begin after the scan")
	}
	for k, absent := range map[string]bool{"e1": false, "e2": false, "e3": false, "j1": false, "e9": true, "j2": true} {
		if c.Absent([]byte(k)) != absent {
			t.Errorf("Absent(%s) = %v, want %v", k, !absent, absent)
		}
	}
	c.Add([]byte("e2"), -1)
	if !c.Absent([]byte("e2")) || !c.Matches([][]byte{[]byte("e1"), []byte("e3"), []byte("j1")}) {
		t.Error("the counts are not the live keys'")
	}
	if c.Matches([][]byte{[]byte("e1"), []byte("j1")}) {
		t.Error("Matches misses a key counted")
	}
	st.Commit()
}
