package config

import (
	"errors"
	"testing"
)

func TestCheckSecurity(t *testing.T) {
	tlsAll := TLSFiles{EnvCA: "X_TLS_CA_FILE", CA: "ca.pem", EnvCert: "X_TLS_CERT_FILE", Cert: "c.pem", EnvKey: "X_TLS_KEY_FILE", Key: "k.pem"}
	tlsHalf := tlsAll
	tlsHalf.Key = ""
	noTLS := TLSFiles{EnvCA: "X_TLS_CA_FILE", EnvCert: "X_TLS_CERT_FILE", EnvKey: "X_TLS_KEY_FILE"}
	lan := func(key string) []GossipPool { return []GossipPool{{EnvKey: "X_GOSSIP_KEY", Key: key}} }
	unjoined := func(key string) []GossipPool { return []GossipPool{{EnvKey: "X_GOSSIP_KEY", Key: key, Unjoined: true}} }
	for _, tc := range []struct {
		name     string
		insecure bool
		tls      TLSFiles
		secret   string
		operator string
		gossip   []GossipPool
		mode     Mode
		err      error
		env      string // the variable the error names
	}{
		{name: "nothing", tls: noTLS, err: ErrNoCredential, env: "X_CLUSTER_SECRET_FILE"},
		{name: "nothing, with a gossip key", tls: noTLS, gossip: lan("k"), err: ErrNoCredential, env: "X_CLUSTER_SECRET_FILE"},
		{name: "insecure", insecure: true, tls: noTLS, gossip: lan(""), mode: ModeInsecure},
		{name: "secret", tls: noTLS, secret: "s", gossip: lan(""), mode: ModeSecret},
		{name: "secret and a gossip key", tls: noTLS, secret: "s", gossip: lan("k"), mode: ModeSecret},
		{name: "TLS and secret", tls: tlsAll, secret: "s", gossip: lan(""), mode: ModeTLS},
		{name: "TLS and a gossip key", tls: tlsAll, gossip: lan("k"), mode: ModeTLS},
		{name: "TLS, no gossip pool", tls: tlsAll, mode: ModeTLS},
		{name: "TLS, gossip without a key", tls: tlsAll, gossip: lan(""), err: ErrPlaintextGossip, env: "X_GOSSIP_KEY"},
		{name: "half TLS", tls: tlsHalf, secret: "s", err: ErrInvalid, env: "X_TLS_KEY_FILE"},
		{name: "half TLS, insecure", insecure: true, tls: tlsHalf, err: ErrInvalid, env: "X_TLS_KEY_FILE"},
		{name: "insecure and TLS", insecure: true, tls: tlsAll, err: ErrContradictory, env: "X_INSECURE"},
		{name: "insecure and secret", insecure: true, tls: noTLS, secret: "s", err: ErrContradictory, env: "X_INSECURE"},
		{name: "insecure and a gossip key", insecure: true, tls: noTLS, gossip: lan("k"), err: ErrContradictory, env: "X_INSECURE"},
		// A pool the process does not join needs no key, but its key still
		// contradicts insecure mode (a gate with GATE_GOSSIP_KEY and no
		// GATE_JOIN).
		{name: "TLS, an unjoined pool without a key", tls: tlsAll, gossip: unjoined(""), mode: ModeTLS},
		{name: "insecure, an unjoined pool", insecure: true, tls: noTLS, gossip: unjoined(""), mode: ModeInsecure},
		{name: "insecure and the key of an unjoined pool", insecure: true, tls: noTLS, gossip: unjoined("k"), err: ErrContradictory, env: "X_INSECURE"},
		{name: "insecure and an operator secret", insecure: true, tls: noTLS, operator: "o", err: ErrContradictory, env: "X_INSECURE"},
		{name: "an operator secret alone", tls: noTLS, operator: "o", err: ErrNoCredential, env: "X_CLUSTER_SECRET_FILE"},
		{name: "secret and an operator secret", tls: noTLS, secret: "s", operator: "o", gossip: lan(""), mode: ModeSecret},
	} {
		mode, err := CheckSecurity(Security{EnvInsecure: "X_INSECURE", Insecure: tc.insecure, TLS: tc.tls,
			EnvSecret: "X_CLUSTER_SECRET_FILE", SecretFile: tc.secret,
			EnvOperatorSecret: "X_OPERATOR_SECRET_FILE", OperatorSecretFile: tc.operator, Gossip: tc.gossip})
		if tc.err == nil {
			if err != nil || mode != tc.mode {
				t.Errorf("%s: mode %v, err %v; want mode %v", tc.name, mode, err, tc.mode)
			}
			continue
		}
		var ce *Error
		if !errors.Is(err, tc.err) || !errors.Is(err, ErrInvalid) || !errors.As(err, &ce) || ce.Env != tc.env {
			t.Errorf("%s: err %v; want %v naming %s", tc.name, err, tc.err, tc.env)
		}
	}
}
