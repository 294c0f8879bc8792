package manager

import (
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The wire's durations and instants are integers (manager.proto): each is
// read here, in one place, as the time.Duration or time.Time it means.

// submitWait is how long a submission may wait for another submission's
// admission of its key (0: answer in_progress at once).
func submitWait(req *rpcpb.SubmitRequest) time.Duration {
	return time.Duration(req.GetWaitMillis()) * time.Millisecond
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
