package membership

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
)

// Settings are a node's operator-facing gossip settings, as the gate and the
// manager read them from their <PREFIX>_GOSSIP_ADDR, _GOSSIP_ADVERTISE,
// _GOSSIP_KEY, _GOSSIP_PROFILE and _JOIN variables.
type Settings struct {
	Addr      string   // bind host:port
	Advertise string   // host:port the others dial; empty: derived from Addr
	Keys      string   // base64 keys, comma-separated (first encrypts); empty: plaintext
	Profile   string   // lan | local
	Seeds     []string // host:port of members to join
	// Secret is the cluster secret: when Keys is empty, the pool's key is
	// derived from it (KeyFromSecret with Label).
	Secret string
	Label  KeyLabel
}

// Config turns Settings into a pool Config. Errors name the variable, built
// from envPrefix ("MANAGER" or "GATE").
func (s Settings) Config(envPrefix, nodeName string, meta Meta, log *slog.Logger) (Config, error) {
	host, p, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return Config{}, fmt.Errorf("%s_GOSSIP_ADDR: %w", envPrefix, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return Config{}, fmt.Errorf("%s_GOSSIP_ADDR: %w", envPrefix, err)
	}
	cfg := Config{NodeName: nodeName, BindAddr: host, BindPort: port, Seeds: s.Seeds,
		Profile: s.Profile, Logger: log, Meta: meta}
	if s.Keys != "" {
		// A comma-separated list: the first key encrypts, the others are
		// accepted too (rolling key rotation, docs/operations.md).
		if cfg.SecretKey, cfg.ExtraKeys, err = ParseSecretKeys(s.Keys); err != nil {
			return Config{}, fmt.Errorf("%s_GOSSIP_KEY: %w", envPrefix, err)
		}
	} else if s.Secret != "" {
		cfg.SecretKey = KeyFromSecret(s.Secret, s.Label)
	}
	if s.Advertise != "" {
		if cfg.AdvertiseAddr, cfg.AdvertisePort, err = ResolveAdvertise(s.Advertise); err != nil {
			return Config{}, fmt.Errorf("%s_GOSSIP_ADVERTISE: %w", envPrefix, err)
		}
	}
	return cfg, nil
}
