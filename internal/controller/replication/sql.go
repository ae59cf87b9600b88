package replication

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// rewindFunctions are the functions pg_rewind calls on its source (the new
// primary) as a role that is not a superuser.
var rewindFunctions = []string{
	"pg_catalog.pg_ls_dir(text, boolean, boolean)",
	"pg_catalog.pg_stat_file(text, boolean)",
	"pg_catalog.pg_read_binary_file(text)",
	"pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean)",
}

// ensureRewindGrants lets the replication role run pg_rewind against the
// primary (a former primary rejoins with it). GRANT is idempotent.
func ensureRewindGrants(ctx context.Context, conn instance.Conn) error {
	for _, fn := range rewindFunctions {
		if _, err := conn.Exec(ctx, fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", fn, quoteIdent(agentapi.ReplicationUser))); err != nil {
			return fmt.Errorf("granting %s EXECUTE on %s: %w", agentapi.ReplicationUser, fn, err)
		}
	}
	return nil
}

// ensureSynchronous sets synchronous_standby_names on the primary to want
// (ALTER SYSTEM, then a reload) when it differs.
func ensureSynchronous(ctx context.Context, conn instance.Conn, want string) error {
	have, _, err := conn.QueryValue(ctx, "SHOW synchronous_standby_names")
	if err != nil {
		return fmt.Errorf("reading synchronous_standby_names: %w", err)
	}
	if have != nil && *have == want {
		return nil
	}
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(want)); err != nil {
		return fmt.Errorf("setting synchronous_standby_names to %q: %w", want, err)
	}
	if _, _, err := conn.QueryValue(ctx, "SELECT pg_catalog.pg_reload_conf()"); err != nil {
		return fmt.Errorf("reloading the configuration after setting synchronous_standby_names: %w", err)
	}
	from := ""
	if have != nil {
		from = *have
	}
	log.FromContext(ctx).Info("Set synchronous_standby_names", "from", from, "to", want)
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
