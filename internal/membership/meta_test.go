package membership

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	cases := []Meta{
		{Role: RoleGate, Datacenter: "dc1", NodeID: "g1"},
		{Role: RoleManager, Datacenter: "eu-west", NodeID: "m1", RPCAddr: "10.0.0.1:7000", RaftAddr: "10.0.0.1:7001",
			HasRaftState: true, Version: 3, Leaving: true, Bootstrap: BootstrapMeta{Expect: 3, Vote: 0xdeadbeefcafef00d}},
		{Role: RoleManager, Datacenter: "d", NodeID: "n", RaftAddr: "[::1]:9", Bootstrap: BootstrapMeta{Expect: 5}},
		{Role: RoleManager, Datacenter: "dc2", NodeID: "m2", RaftAddr: "h:1", Settings: "pending_ttl=60s committed_ttl=300s"},
	}
	for _, m := range cases {
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("encode %+v: %v", m, err)
		}
		got, err := DecodeMeta(b)
		if err != nil || got != m {
			t.Fatalf("round trip: got %+v, %v; want %+v", got, err, m)
		}
		// A later revision of format 1 may append fields.
		got, err = DecodeMeta(append(b, 0xff, 0x01))
		if err != nil || got != m {
			t.Fatalf("trailing bytes: got %+v, %v", got, err)
		}
	}
	b, _ := cases[0].Encode()
	if len(b) > 20 {
		t.Errorf("gate meta is %d bytes; expected a compact encoding", len(b))
	}
}

func TestMetaDecodeErrors(t *testing.T) {
	good, err := Meta{Role: RoleManager, Datacenter: "dc1", NodeID: "m1", RaftAddr: "h:1", Bootstrap: BootstrapMeta{Vote: 7}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMetaCorrupt},
		{"future format", append([]byte{2}, good[1:]...), ErrMetaFormat},
		{"bad role", append([]byte{1, 9}, good[2:]...), ErrMetaCorrupt},
		{"header only", good[:2], ErrMetaCorrupt},
	}
	// Every prefix is damaged but the last: without its final byte (the
	// empty Settings' length) it is a revision-1 encoding, tested below.
	for i := 3; i < len(good)-1; i++ {
		cases = append(cases, struct {
			name string
			in   []byte
			want error
		}{"truncated", good[:i], ErrMetaCorrupt})
	}
	for _, c := range cases {
		_, err := DecodeMeta(c.in)
		if !errors.Is(err, c.want) {
			t.Errorf("%s (%d bytes): err = %v; want %v", c.name, len(c.in), err, c.want)
		}
		var me *MetaError
		if !errors.As(err, &me) {
			t.Errorf("%s: error %T is not a *MetaError", c.name, err)
		}
	}
}

// A node of revision 1 (no Settings) is decoded with empty Settings.
func TestMetaDecodesRevision1(t *testing.T) {
	m := Meta{Role: RoleManager, Datacenter: "dc1", NodeID: "m1", RaftAddr: "h:1"}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b[:len(b)-1])
	if err != nil || got != m {
		t.Fatalf("revision 1: got %+v, %v", got, err)
	}
	m.Settings = "pending_ttl=60s"
	b, _ = m.Encode()
	if _, err := DecodeMeta(b[:len(b)-2]); !errors.Is(err, ErrMetaCorrupt) {
		t.Fatalf("truncated Settings: %v", err)
	}
}

func TestMetaEncodeLimits(t *testing.T) {
	m := Meta{Role: RoleManager, Datacenter: "dc1", NodeID: strings.Repeat("x", 600), RaftAddr: "h:1"}
	if _, err := m.Encode(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := (Meta{Role: "db", Datacenter: "d", NodeID: "n"}).Encode(); !errors.Is(err, ErrInvalidMeta) {
		t.Fatalf("bad role: %v", err)
	}
}

func TestConfigValidateNamesField(t *testing.T) {
	base := func() Config {
		return Config{NodeName: "n1", Meta: Meta{Role: RoleManager, Datacenter: "dc1", NodeID: "m1", RaftAddr: "127.0.0.1:1"}}
	}
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"NodeName", func(c *Config) { c.NodeName = "" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "not-an-ip" }},
		{"BindPort", func(c *Config) { c.BindPort = 70000 }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "x" }},
		{"AdvertisePort", func(c *Config) { c.AdvertisePort = -1 }},
		{"Seeds", func(c *Config) { c.Seeds = []string{"h:notaport"} }},
		{"SecretKey", func(c *Config) { c.SecretKey = []byte("short") }},
		{"Profile", func(c *Config) { c.Profile = "metro" }},
		{"Meta.Role", func(c *Config) { c.Meta.Role = "" }},
		{"Meta.Datacenter", func(c *Config) { c.Meta.Datacenter = "" }},
		{"Meta.NodeID", func(c *Config) { c.Meta.NodeID = "" }},
		{"Meta.RaftAddr", func(c *Config) { c.Meta.RaftAddr = "" }},
		{"Meta.RPCAddr", func(c *Config) { c.Meta.RPCAddr = "noport" }},
	}
	for _, tc := range cases {
		c := base()
		tc.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v; want a ConfigError for that field", tc.field, err)
		}
	}
	c := base()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	c.SecretKey = make([]byte, 7)
	if err := c.Validate(); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("key error does not match ErrInvalidKey: %v", err)
	}
	gate := base()
	gate.Meta = Meta{Role: RoleGate, Datacenter: "dc1", NodeID: "g1"}
	if err := gate.Validate(); err != nil {
		t.Fatalf("a gate needs no Raft address: %v", err)
	}
}

func TestParseSecretKey(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		k := make([]byte, n)
		k[0] = byte(n)
		got, err := ParseSecretKey(" " + base64.StdEncoding.EncodeToString(k) + "\n")
		if err != nil || len(got) != n || got[0] != byte(n) {
			t.Fatalf("%d bytes: %v %v", n, got, err)
		}
	}
	for _, bad := range []string{"", "%%%", base64.StdEncoding.EncodeToString(make([]byte, 31))} {
		if _, err := ParseSecretKey(bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseSecretKey(%q) = %v; want ErrInvalidKey", bad, err)
		}
	}
	// A list: empty is no key; white space alone is an error, never a
	// plaintext pool.
	if k, extra, err := ParseSecretKeys(""); k != nil || extra != nil || err != nil {
		t.Errorf("ParseSecretKeys(\"\") = %v %v %v; want no key", k, extra, err)
	}
	for _, blank := range []string{" ", "\n", " \t "} {
		if k, _, err := ParseSecretKeys(blank); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseSecretKeys(%q) = %v, %v; want ErrInvalidKey", blank, k, err)
		}
	}
}

// The errors' texts name the field, its value and the reason, leaving out
// what is empty.
func TestErrorTexts(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&ConfigError{Field: "BindPort", Value: "-1", Reason: "must be 0..65535"}, `membership: invalid config BindPort="-1": must be 0..65535`},
		{&ConfigError{Field: "Meta.NodeID", Err: &MetaError{Field: "NodeID", Err: ErrInvalidMeta, Reason: "required"}},
			"membership: invalid config Meta.NodeID: membership: invalid meta: NodeID: required"},
		{&MetaError{Err: ErrMetaCorrupt, Reason: "empty"}, "membership: corrupt meta: empty"},
		{&MetaError{Field: "Role", Value: "db", Err: ErrInvalidMeta}, `membership: invalid meta: Role="db"`},
		{&MetaError{Err: ErrMetaTooLarge}, "membership: meta too large"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %s\nwant %s", got, tc.want)
		}
	}
}

// TestMetaEncodingBytes pins format 1 byte for byte: nodes of different
// versions read each other's meta, so the encoding must not drift.
func TestMetaEncodingBytes(t *testing.T) {
	cases := []struct {
		m    Meta
		want []byte
	}{
		{Meta{Role: RoleGate, Datacenter: "dc1", NodeID: "g1"},
			[]byte{1, 1, 0, 0, 0, 3, 'd', 'c', '1', 2, 'g', '1', 0, 0, 0}},
		{Meta{Role: RoleManager, Datacenter: "d", NodeID: "n", RaftAddr: "h:1", HasRaftState: true, Leaving: true,
			Version: 2, Bootstrap: BootstrapMeta{Expect: 3, Vote: 0x0102030405060708}, Settings: "s"},
			[]byte{1, 2, 7, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 1, 'd', 1, 'n', 0, 3, 'h', ':', '1', 1, 's'}},
	}
	for _, c := range cases {
		b, err := c.m.Encode()
		if err != nil || string(b) != string(c.want) {
			t.Errorf("Encode(%+v) = %v, %v; want %v", c.m, b, err, c.want)
		}
	}
}
