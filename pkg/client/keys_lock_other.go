//go:build !unix

package client

import "context"

// lockFile takes no lock where flock does not exist: there a state file
// belongs to one process at a time (docs/client.md).
func lockFile(context.Context, string) (unlock func(), err error) { return func() {}, nil }
