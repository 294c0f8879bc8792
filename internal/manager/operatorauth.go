package manager

import (
	"fmt"
	"log/slog"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/rpc"
)

// ErrOperatorSecretReused: MANAGER_OPERATOR_SECRET_FILE holds the cluster
// secret, which every gate holds too; the operator role would mean nothing.
var ErrOperatorSecretReused = fmt.Errorf("%w: the operator secret must differ from the cluster secret", config.ErrInvalid)

// operatorAuth is what the operator routes accept (docs/security.md,
// "Operator role"): the operator secret, an operator certificate when the
// RPC listener serves mutual TLS, and, only on a manager with no credential
// configured at all, anyone.
func operatorAuth(cfg Config, clusterSecret string, clusterTLS bool, log *slog.Logger) (rpc.OperatorAuth, error) {
	var auth rpc.OperatorAuth
	if cfg.OperatorSecretFile != "" {
		s, err := config.ReadSecretFile(EnvOperatorSecretFile, cfg.OperatorSecretFile)
		if err != nil {
			return auth, err
		}
		if s == clusterSecret {
			return auth, fmt.Errorf("%s: %w", EnvOperatorSecretFile, ErrOperatorSecretReused)
		}
		auth.Secret = s
	}
	switch {
	case auth.Secret != "":
	case clusterTLS:
		log.Info("no operator secret: the operator routes accept only client certificates with the URI SAN " +
			rpc.OperatorRoleURI + "; set " + EnvOperatorSecretFile + " for oncectl's --operator-secret-file")
	case clusterSecret != "":
		log.Warn("no operator credential: the operator routes (snapshot, raft peers, keyring, members) are closed; set " +
			EnvOperatorSecretFile + " (docs/security.md)")
	default:
		// No credential of any kind: the listener is open to whoever
		// reaches it, and so are the operator routes.
		auth.OpenWithoutCredentials = true
		log.Warn("no credential configured: the operator routes (snapshot restore, raft peer removal, keyring) are open to any caller; set " +
			EnvOperatorSecretFile + " and " + EnvClusterSecretFile + " (docs/security.md)")
	}
	return auth, nil
}
