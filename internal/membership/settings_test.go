package membership

import (
	"strings"
	"testing"
)

func TestSettingsConfig(t *testing.T) {
	meta := Meta{Role: RoleGate, Datacenter: "dc1", NodeID: "g1"}
	cfg, err := Settings{Addr: "127.0.0.1:7300", Advertise: "127.0.0.1:7301", Profile: ProfileLocal,
		Seeds: []string{"127.0.0.1:7200"}}.Config("GATE", "g1", meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BindAddr != "127.0.0.1" || cfg.BindPort != 7300 || cfg.AdvertiseAddr != "127.0.0.1" || cfg.AdvertisePort != 7301 ||
		cfg.NodeName != "g1" || cfg.SecretKey != nil || len(cfg.Seeds) != 1 {
		t.Fatalf("config: %+v", cfg)
	}
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{Settings{Addr: "nope"}, "GATE_GOSSIP_ADDR"},
		{Settings{Addr: "127.0.0.1:x"}, "GATE_GOSSIP_ADDR"},
		{Settings{Addr: "127.0.0.1:1", Keys: "not-base64!"}, "GATE_GOSSIP_KEY"},
		// A blank key is no "no key": it neither turns encryption off nor
		// stands in the way of the key derived from the secret.
		{Settings{Addr: "127.0.0.1:1", Keys: " "}, "GATE_GOSSIP_KEY"},
		{Settings{Addr: "127.0.0.1:1", Keys: "\n", Secret: "0123456789abcdef0123456789abcdef"}, "GATE_GOSSIP_KEY"},
		{Settings{Addr: "127.0.0.1:1", Advertise: "0.0.0.0:1"}, "GATE_GOSSIP_ADVERTISE"},
	} {
		if _, err := tc.s.Config("GATE", "g1", meta, nil); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: want an error naming %s, got %v", tc.s, tc.want, err)
		}
	}
}
