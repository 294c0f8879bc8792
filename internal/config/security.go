package config

import (
	"errors"
	"strings"
)

// Errors of CheckSecurity; each also matches ErrInvalid (the process exits
// with ExitConfig).
var (
	// ErrNoCredential: neither cluster TLS files nor a cluster secret, and
	// insecure mode not asked for.
	ErrNoCredential = errors.New("no cluster credential")
	// ErrContradictory: insecure mode asked for together with a credential
	// (an operator secret included) or a gossip key.
	ErrContradictory = errors.New("insecure mode together with a credential")
	// ErrPlaintextGossip: a secured process would gossip without a key (TLS
	// files alone give no key to derive one from).
	ErrPlaintextGossip = errors.New("gossip would be plaintext")
)

// Security is what a process was given to secure its cluster traffic
// (docs/security.md), each value with the variable (or flag) that gave it.
// CheckSecurity is the one rule the manager, the gate and oncectl apply.
type Security struct {
	// EnvInsecure and Insecure: MANAGER_INSECURE, GATE_INSECURE, --insecure.
	EnvInsecure string
	Insecure    bool
	// TLS is the cluster TLS trio.
	TLS TLSFiles
	// EnvSecret and SecretFile: the cluster secret's file.
	EnvSecret  string
	SecretFile string
	// EnvOperatorSecret and OperatorSecretFile: the operator secret's file
	// (a manager's MANAGER_OPERATOR_SECRET_FILE, oncectl's
	// --operator-secret-file). Not a cluster credential by itself, and
	// refused with insecure mode, which opens the Operator service to all.
	EnvOperatorSecret  string
	OperatorSecretFile string
	// Gossip lists the gossip pools of the process, joined or not.
	Gossip []GossipPool
}

// GossipPool is one gossip pool of a process, and its explicit key.
type GossipPool struct {
	EnvKey string
	Key    string
	// Unjoined: the process joins no such pool this time (a gate without
	// GATE_JOIN). It needs no key then, but a key given still contradicts
	// insecure mode.
	Unjoined bool
}

// Mode is what CheckSecurity decided.
type Mode int

const (
	// ModeTLS: cluster TLS from files (the secret may come with it).
	ModeTLS Mode = iota + 1
	// ModeSecret: mutual TLS derived from the cluster secret.
	ModeSecret
	// ModeInsecure: no authentication, no encryption (development only).
	ModeInsecure
)

// CheckSecurity refuses a process that would start without a credential
// (unless insecure mode is asked for explicitly) or half-secured:
//
//   - a TLS trio partly set;
//   - insecure together with TLS files, a cluster secret, an operator secret
//     or a gossip key (a contradiction: one of the two is a mistake);
//   - neither TLS files nor a secret, and not insecure;
//   - TLS files without a secret, joining a gossip pool without its key
//     (the secret would have given one: membership.KeyFromSecret).
//
// Errors are *Error values naming the variables to set; they match
// ErrInvalid and one of ErrNoCredential, ErrContradictory,
// ErrPlaintextGossip.
func CheckSecurity(s Security) (Mode, error) {
	if err := s.TLS.Check(); err != nil {
		return 0, err
	}
	credential := s.TLS.Set() || s.SecretFile != ""
	if s.Insecure {
		var given []string
		if s.TLS.Set() {
			given = append(given, s.TLS.EnvCA)
		}
		if s.SecretFile != "" {
			given = append(given, s.EnvSecret)
		}
		if s.OperatorSecretFile != "" {
			given = append(given, s.EnvOperatorSecret)
		}
		for _, g := range s.Gossip {
			if g.Key != "" {
				given = append(given, g.EnvKey)
			}
		}
		if len(given) > 0 {
			return 0, Invalid(s.EnvInsecure, "true", "false when "+strings.Join(given, ", ")+" is set (insecure mode runs without any credential: unset one or the other)", ErrContradictory)
		}
		return ModeInsecure, nil
	}
	if !credential {
		return 0, Invalid(s.EnvSecret, "", "a cluster credential: "+s.EnvSecret+" (a file holding the cluster secret), or "+
			s.TLS.EnvCA+", "+s.TLS.EnvCert+" and "+s.TLS.EnvKey+" (mutual TLS); or "+s.EnvInsecure+"=true to run without authentication or encryption (development only)", ErrNoCredential)
	}
	if s.SecretFile == "" {
		for _, g := range s.Gossip {
			if g.Key == "" && !g.Unjoined {
				return 0, Invalid(g.EnvKey, "", "a gossip key when "+s.TLS.EnvCA+" is set without "+s.EnvSecret+" (or set "+s.EnvSecret+", from which the key is derived)", ErrPlaintextGossip)
			}
		}
		return ModeTLS, nil
	}
	if s.TLS.Set() {
		return ModeTLS, nil
	}
	return ModeSecret, nil
}

// InsecureWarning is the warning a process logs at start in ModeInsecure.
const InsecureWarning = "insecure mode: RPC, Raft and gossip are unauthenticated and unencrypted; anyone who reaches the ports can submit, read, forge Raft entries and change the cluster (development only; docs/security.md)"
