package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Role is what a cluster certificate is for, carried in the certificate as a
// URI subject alternative name spiffe://once/role/<role> (Role.URI). A
// certificate derived from the cluster secret always carries one; operators
// issuing certificates from their own CA add it (docs/security.md), and a
// manager then refuses a certificate of another role where that role has no
// business (a gate's on the Raft port).
type Role string

// The roles. Another is a new constant here and a place in the lists a
// listener accepts (RaftRoles, RPCRoles).
const (
	RoleManager Role = "manager"
	RoleGate    Role = "gate"
	// RoleOperator is an operator's client certificate (oncectl --cert):
	// the RPC listener accepts it like a gate's, and the Operator service
	// accepts it as an operator credential only when the cluster CA is the
	// operator's own (MANAGER_TLS_*), never the CA derived from the cluster
	// secret, which every gate could sign with (rpc.OperatorAuth).
	RoleOperator Role = "operator"
)

// RolePrefix is the URI subject alternative name a role follows.
const RolePrefix = "spiffe://once/role/"

// RaftRoles are the roles the Raft port accepts; RPCRoles the RPC port's.
var (
	RaftRoles = []Role{RoleManager}
	RPCRoles  = []Role{RoleManager, RoleGate, RoleOperator}
)

// ErrRole is matched by every refusal of a certificate for its role.
var ErrRole = errors.New("certificate role refused")

// URI is the role's subject alternative name.
func (r Role) URI() *url.URL {
	u, _ := url.Parse(RolePrefix + string(r))
	return u
}

// RoleOf returns the role a certificate carries: "" when it carries none;
// an error matching ErrRole when it carries more than one, or an empty one.
func RoleOf(c *x509.Certificate) (Role, error) {
	var found []Role
	for _, u := range c.URIs {
		s := u.String()
		if !strings.HasPrefix(s, RolePrefix) {
			continue
		}
		r := Role(strings.TrimPrefix(s, RolePrefix))
		if r == "" || strings.Contains(string(r), "/") {
			return "", fmt.Errorf("%w: malformed role URI %q", ErrRole, s)
		}
		found = append(found, r)
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("%w: more than one role (%v)", ErrRole, found)
	}
}

// checkRole accepts the peer's leaf certificate when its role is one of
// accept, or when it carries none and requireRole is false (certificates an
// operator issued without roles, as before roles existed).
func checkRole(cs tls.ConnectionState, accept []Role, requireRole bool) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no certificate", ErrRole)
	}
	r, err := RoleOf(cs.PeerCertificates[0])
	if err != nil {
		return err
	}
	if r == "" {
		if requireRole {
			return fmt.Errorf("%w: the certificate carries no role (%s<role>)", ErrRole, RolePrefix)
		}
		return nil
	}
	if !slices.Contains(accept, r) {
		return fmt.Errorf("%w: role %q is not accepted here (want %v)", ErrRole, r, accept)
	}
	return nil
}
