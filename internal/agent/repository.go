package agent

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// longIOTimeout is the io-timeout of a base backup or a restore.
const longIOTimeout = "--io-timeout=60"

// restoreArgs are pgbackrest restore's options for t.
func restoreArgs(t agentapi.RecoveryTarget) ([]string, error) {
	switch {
	case t.Time != "":
		at, err := time.Parse(time.RFC3339Nano, t.Time)
		if err != nil {
			return nil, fmt.Errorf("recovery target time %q: %w", t.Time, err)
		}
		// PostgreSQL's timestamptz input, in UTC.
		return []string{"--type=time", "--target=" + at.UTC().Format("2006-01-02 15:04:05.999999") + "+00", "--target-action=promote"}, nil
	case t.LSN != "":
		return []string{"--type=lsn", "--target=" + t.LSN, "--target-action=promote"}, nil
	case t.XID != "":
		return []string{"--type=xid", "--target=" + t.XID, "--target-action=promote"}, nil
	case t.Name != "":
		return []string{"--type=name", "--target=" + t.Name, "--target-action=promote"}, nil
	}
	return []string{"--type=default"}, nil
}

// readEnvJSON decodes the JSON document of the environment variable name
// into v; it says whether the variable was set.
func readEnvJSON(name string, v any) (bool, error) {
	raw := os.Getenv(name)
	if raw == "" {
		return false, nil
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return true, fmt.Errorf("$%s: %w", name, err)
	}
	return true, nil
}

// pgbackrestOptions renders r as the [global] options of a pgBackRest
// configuration, reading its secrets from their files (or r.Secrets);
// dir holds pgBackRest's logs, lock files and spool, and the CA file of
// r.Secrets.
func pgbackrestOptions(r agentapi.Repository, dir string) (map[string]string, error) {
	sec, err := repositorySecrets(r)
	if err != nil {
		return nil, err
	}
	key, secret := strings.TrimSpace(sec.AccessKeyID), strings.TrimSpace(sec.SecretAccessKey)
	host, port := r.Endpoint, ""
	if h, p, err := net.SplitHostPort(r.Endpoint); err == nil {
		host, port = h, p
	}
	o := map[string]string{
		"repo1-type":          "s3",
		"repo1-s3-endpoint":   host,
		"repo1-s3-bucket":     r.Bucket,
		"repo1-s3-region":     cmp.Or(r.Region, "us-east-1"),
		"repo1-s3-uri-style":  cmp.Or(r.URIStyle, "path"),
		"repo1-s3-key":        key,
		"repo1-s3-key-secret": secret,
		"repo1-path":          r.Path,
		"compress-type":       "zst",
		"start-fast":          "y",
		// Standbys archive what they receive (archive_mode=always, see
		// archiveSettings), and a promoted standby keeps that setting
		// until it restarts: pgBackRest's backup refuses such a primary
		// ("archive_mode=always not supported") unless told it is meant.
		// Two pushes of one segment are the same file, which it accepts
		// (TestPointInTimeRecoveryAcrossAFailover).
		"archive-mode-check": "n",
		"log-path":           dir,
		"lock-path":          filepath.Join(dir, "lock"),
		"spool-path":         filepath.Join(dir, "spool"),
		"log-level-console":  "off",
		"log-level-stderr":   "error",
		"log-level-file":     "warn",
		// pgBackRest retries a network error until 8 io-timeouts have
		// passed (ERRORS.md of test/framework/objectstore): with 10 s, a
		// store that does not answer fails an archive-push in 80 s instead
		// of 8 minutes, so pg_stat_archiver says so soon. Backups and
		// restores, which move more, set their own (longIOTimeout).
		"io-timeout": "10",
	}
	if port != "" {
		o["repo1-storage-port"] = port
	}
	switch {
	case r.Secrets != nil && r.Secrets.CA != "":
		ca := filepath.Join(dir, "source-ca.crt")
		if _, err := writeFileAtomic(ca, []byte(r.Secrets.CA)); err != nil {
			return nil, err
		}
		o["repo1-storage-ca-file"] = ca
	case r.Secrets == nil && r.CADir != "":
		o["repo1-storage-ca-file"] = filepath.Join(r.CADir, agentapi.CAFile)
	}
	if pass := strings.TrimSpace(sec.Passphrase); pass != "" {
		o["repo1-cipher-type"] = "aes-256-cbc"
		o["repo1-cipher-pass"] = pass
	}
	// No retention option: the expire at the end of each backup removes
	// nothing (pgBackRest warns that repo1-retention-full is not set), and
	// the agent expires with a count of its own (expire.go).
	return o, nil
}

// repositorySecrets are r's credentials and cipher passphrase: r.Secrets
// (whose keys must be one line each), else read from their files.
func repositorySecrets(r agentapi.Repository) (*agentapi.RepositorySecrets, error) {
	read := func(d, file string) (string, error) {
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil {
			return "", fmt.Errorf("reading the object store's %s: %w", file, err)
		}
		return oneLine(file, string(b))
	}
	sec := r.Secrets
	if sec == nil {
		sec = &agentapi.RepositorySecrets{}
		var err error
		if sec.AccessKeyID, err = read(r.CredentialsDir, agentapi.AccessKeyIDFile); err != nil {
			return nil, err
		}
		if sec.SecretAccessKey, err = read(r.CredentialsDir, agentapi.SecretAccessKeyFile); err != nil {
			return nil, err
		}
		if r.CipherDir != "" {
			if sec.Passphrase, err = read(r.CipherDir, agentapi.PassphraseFile); err != nil {
				return nil, err
			}
		}
	} else {
		for _, v := range []struct{ name, v string }{{agentapi.AccessKeyIDFile, sec.AccessKeyID}, {agentapi.SecretAccessKeyFile, sec.SecretAccessKey}} {
			if _, err := oneLine(v.name, v.v); err != nil {
				return nil, err
			}
		}
	}
	return sec, nil
}

// pgbackrestConfig is a whole pgBackRest configuration: global holds the
// repository's options, the stanza section the local server's.
func pgbackrestConfig(global map[string]string, pgdata, socketDir string, port int, user string) string {
	var b strings.Builder
	section := func(name string, o map[string]string) {
		fmt.Fprintf(&b, "[%s]\n", name)
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s\n", k, o[k])
		}
	}
	section("global", global)
	b.WriteString("\n")
	section(agentapi.Stanza, map[string]string{
		"pg1-path":        pgdata,
		"pg1-socket-path": socketDir,
		"pg1-port":        fmt.Sprint(port),
		"pg1-user":        user,
	})
	return b.String()
}

// writeFileAtomic replaces path with data (mode 0600) unless it already
// holds exactly that; it says whether it wrote.
func writeFileAtomic(path string, data []byte) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return false, nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	return true, nil
}

// oneLine is a secret's value without surrounding space; a value that is
// empty or has several lines is refused (it would break the
// configuration file).
func oneLine(name, v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, "\n\r") {
		return "", fmt.Errorf("the object store's %s is empty or has several lines", name)
	}
	return v, nil
}
