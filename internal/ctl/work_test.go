package ctl

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/once-dev/once/pkg/api"
)

// TestTailStartsAtACharacter: the end of a long stderr kept as a job's error
// starts at a whole character, so it stays valid UTF-8 within the bound.
func TestTailStartsAtACharacter(t *testing.T) {
	for _, end := range []string{"", "x", "xx"} { // the cut falls between or inside the 2-byte é
		stderr := strings.Repeat("é", api.MaxJobErrorBytes) + end
		got := tail([]byte(stderr), errors.New("exit status 1"))
		if !utf8.ValidString(got) || len(got) > api.MaxJobErrorBytes || len(got) < api.MaxJobErrorBytes-1 {
			t.Fatalf("ending %q: %d bytes, valid %v", end, len(got), utf8.ValidString(got))
		}
	}
	if got := tail(nil, errors.New("exit status 3")); got != "exit status 3" {
		t.Fatalf("empty stderr: %q", got)
	}
}
