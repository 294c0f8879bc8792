package managerd

import (
	"fmt"
	"log/slog"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
)

// ErrOperatorSecretReused: MANAGER_OPERATOR_SECRET_FILE holds the cluster
// secret, which every gate holds too; the operator role would mean nothing.
var ErrOperatorSecretReused = fmt.Errorf("%w: the operator secret must differ from the cluster secret", config.ErrInvalid)

// operatorAuth is what the Operator service accepts (docs/security.md,
// "Operator role"): the operator secret; an operator certificate when the
// RPC listener verifies callers against the cluster CA of MANAGER_TLS_*
// (fileTLS), never against the CA derived from the cluster secret, with which
// any gate could sign itself the operator role; and, only in insecure mode
// (MANAGER_INSECURE), anyone.
func operatorAuth(cfg manager.Config, clusterSecret string, fileTLS bool, log *slog.Logger) (rpc.OperatorAuth, error) {
	var auth rpc.OperatorAuth
	if cfg.Insecure {
		// CheckSecurity refused an operator secret together with insecure
		// mode: the listener is open to whoever reaches it, and so is the
		// Operator service.
		auth.Insecure = true
		log.Warn(manager.EnvInsecure + "=true: the Operator service (snapshot restore, raft peer removal, keyring) is open to any caller")
		return auth, nil
	}
	if cfg.OperatorSecretFile != "" {
		s, err := config.ReadSecretFile(manager.EnvOperatorSecretFile, cfg.OperatorSecretFile)
		if err != nil {
			return auth, err
		}
		if s == clusterSecret {
			return auth, fmt.Errorf("%s: %w", manager.EnvOperatorSecretFile, ErrOperatorSecretReused)
		}
		auth.Secret = s
	}
	auth.Certificates = fileTLS
	switch {
	case auth.Secret != "":
	case fileTLS:
		log.Info("no operator secret: the Operator service accepts only client certificates with the URI SAN " +
			rpc.OperatorRoleURI + "; set " + manager.EnvOperatorSecretFile + " for oncectl's --operator-secret-file")
	default:
		log.Warn("no operator credential: the Operator service (snapshot, raft peers, keyring, members) is closed; set " +
			manager.EnvOperatorSecretFile + " (a certificate of the CA derived from the cluster secret never opens them; docs/security.md)")
	}
	return auth, nil
}
