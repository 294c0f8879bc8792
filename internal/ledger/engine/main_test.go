package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// Every store a test opens is closed, its key counts' scan included.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
