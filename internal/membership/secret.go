package membership

import (
	"crypto/hkdf"
	"crypto/sha256"
)

// KeyLabel tells the gossip keys derived from the cluster secret apart: the
// LAN pool (managers and gates of a datacenter) and the WAN pool (the
// federation's managers) get different keys from one secret.
type KeyLabel string

// The labels, the HKDF info of each pool's key.
const (
	KeyLAN KeyLabel = "once gossip LAN key v1"
	KeyWAN KeyLabel = "once gossip WAN key v1"
)

// KeyFromSecret derives a pool's 32-byte gossip key (AES-256-GCM) from the
// cluster secret with HKDF-SHA256, so a cluster secured by the secret never
// gossips in plaintext when no key is set explicitly (docs/security.md).
func KeyFromSecret(secret string, label KeyLabel) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), nil, string(label), 32)
	if err != nil {
		panic("membership: HKDF of 32 bytes cannot fail: " + err.Error())
	}
	return k
}
