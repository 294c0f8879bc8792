package clockwatch

import (
	"testing"

	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }
