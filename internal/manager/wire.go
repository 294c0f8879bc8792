package manager

import (
	"math"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// The wire's durations and instants are integers (manager.proto): each is
// read here, in one place, as the time.Duration or time.Time it means, and
// its bounds are here (validateSubmit and validateLease check them).

// maxResultTTL bounds a submission's result_ttl_nanos: a century, far above
// any lifetime a gate asks (IDEMPOTENCY_MAX_TTL_SECONDS is at most a year),
// and far enough below the largest instant a Unix-nanosecond int64 holds
// (the year 2262) that ledger time plus it is always an instant.
const maxResultTTL = 100 * 365 * 24 * time.Hour

// maxLeaseWait bounds a lease's wait_nanos: the gate's bound
// (api.MaxWaitSeconds).
const maxLeaseWait = api.MaxWaitSeconds * time.Second

// submitWait is how long a submission may wait for another submission's
// admission of its key (0: answer in_progress at once); a wait longer than
// a time.Duration holds is that long, until the submission's deadline.
func submitWait(req *rpcpb.SubmitRequest) time.Duration {
	ms := req.GetWaitMillis()
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// resultTTL is the lifetime the submission asks for its key's outcome (0:
// the configured default).
func resultTTL(req *rpcpb.SubmitRequest) time.Duration {
	return time.Duration(req.GetResultTtlNanos())
}

// gateExpiryBasis is the instant the gate stamped for the key's TTL to count
// from, the zero time when it stamped none (see expiryBasis).
func gateExpiryBasis(req *rpcpb.SubmitRequest) time.Time {
	if n := req.GetExpiryBasisUnixNanos(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// leaseWait is how long a lease may be held for a job to be queued.
func leaseWait(req *rpcpb.LeaseRequest) time.Duration {
	return time.Duration(req.GetWaitNanos())
}

// leaseFor is the lease a lease or heartbeat asks for (0: the default).
func leaseFor(req interface{ GetLeaseForNanos() int64 }) time.Duration {
	return time.Duration(req.GetLeaseForNanos())
}
