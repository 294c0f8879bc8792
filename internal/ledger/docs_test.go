package ledger

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocsNameEveryCommand holds docs/ledger.md's "Commands" to the command
// types this build knows: each has its row in the table of types, under its
// type byte, and its layout under "Layouts:".
func TestDocsNameEveryCommand(t *testing.T) {
	b, err := os.ReadFile("../../docs/ledger.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\nLayouts:\n")
	if start < 0 {
		t.Fatal(`docs/ledger.md has no "Layouts:" block`)
	}
	block := doc[start:]
	open := strings.Index(block, "```\n")
	if open < 0 {
		t.Fatal(`docs/ledger.md: "Layouts:" is not followed by a code block`)
	}
	block = block[open+4:]
	block = block[:strings.Index(block, "```")]
	// A layout's line begins with the names of the commands it lays out:
	// "Heartbeat tenant string ...", "Cancel, Retry".
	laidOut := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		if line == "" || line[0] == ' ' {
			continue
		}
		for _, word := range strings.Fields(line) {
			name := strings.TrimSuffix(word, ",")
			if !unicode.IsUpper(rune(name[0])) {
				break
			}
			laidOut[name] = true
		}
	}
	for typ, kind := range commandKinds {
		name := strings.TrimPrefix(fmt.Sprintf("%T", kind.decode(&decoder{base: ErrMalformed})), "ledger.")
		row := regexp.MustCompile(fmt.Sprintf(`(?m)^\| 0x%02X \| %s\b`, uint8(typ), regexp.QuoteMeta(name)))
		if !row.MatchString(doc) {
			t.Errorf("docs/ledger.md: no row | 0x%02X | %s | in the table of command types", uint8(typ), name)
		}
		if !laidOut[name] {
			t.Errorf("docs/ledger.md: no layout of %s (type 0x%02X) under \"Layouts:\"", name, uint8(typ))
		}
	}
}
