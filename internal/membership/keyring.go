package membership

import (
	"bytes"
	"errors"
	"fmt"
)

// Gossip key rotation: these act on this node's keyring only; KeyringQuery
// (keyring_query.go, oncectl gossip keyring) runs a step on every node of
// the pool. Each step must reach every node before the next:
//
//  1. InstallKey(new) everywhere: nodes now decrypt both keys, still encrypt with the old.
//  2. UseKey(new) everywhere: nodes encrypt with the new key; the old one still decrypts.
//  3. RemoveKey(old) everywhere.
//
// Restarted nodes must be configured with the new key (MANAGER_GOSSIP_KEY,
// GATE_GOSSIP_KEY) from step 2 on. See docs/operations.md.

// InstallKey adds key to the keyring (decryption only until UseKey).
func (p *Pool) InstallKey(key []byte) error {
	return p.changeKeyring(key, p.keyring.AddKey)
}

// UseKey makes an installed key the one used to encrypt.
func (p *Pool) UseKey(key []byte) error {
	return p.changeKeyring(key, p.keyring.UseKey)
}

// RemoveKey removes a key that is not the primary one.
func (p *Pool) RemoveKey(key []byte) error {
	return p.changeKeyring(key, func(key []byte) error {
		if bytes.Equal(p.keyring.GetPrimaryKey(), key) {
			return errors.New("cannot remove the primary key (UseKey another first)")
		}
		return p.keyring.RemoveKey(key)
	})
}

// changeKeyring checks key and applies change to a copy of it (the keyring
// keeps the slice it is given), under keyMu; its error wraps ErrInvalidKey.
func (p *Pool) changeKeyring(key []byte, change func([]byte) error) error {
	if p.keyring == nil {
		return ErrNoEncryption
	}
	if err := validateKeyLen(len(key)); err != nil {
		return err
	}
	p.keyMu.Lock()
	defer p.keyMu.Unlock()
	if err := change(bytes.Clone(key)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// Keys returns the installed keys, the primary (encrypting) one first; nil
// when the pool is not encrypted.
func (p *Pool) Keys() [][]byte {
	if p.keyring == nil {
		return nil
	}
	p.keyMu.Lock() // not while a change moves the keys GetKeys returns
	defer p.keyMu.Unlock()
	keys := p.keyring.GetKeys()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}
